"""Shared functions generated kernels may call, imported by the module when used.

They live in `cuvil.runtime.blas`, compiled once per installation; the import line quotes
that file's hash so that kernels cached against an older version are not reused.
"""

from __future__ import annotations

HELPERS = {"gemv": "cuvil.runtime.blas"}


def helper_text(name: str) -> str:
    """The import that makes helper `name` available to the module's kernels."""
    module = HELPERS[name]
    from cuvil.runtime.blas import source_hash

    return f"from {module} import {name}  # {module} {source_hash()}"
