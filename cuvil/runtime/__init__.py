"""The compiled runtime: memory plan, kernel-module cache, thread policy, `CompiledGraph`.

Imported lazily so that `cuvil.lower` and `cuvil.runtime` can refer to each other.
"""

from __future__ import annotations

import importlib

_LAZY = {"CompiledGraph": "cuvil.runtime.compiled", "CompileReport": "cuvil.runtime.report",
         "FallbackReport": "cuvil.runtime.report", "KernelReport": "cuvil.runtime.report"}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'cuvil.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
