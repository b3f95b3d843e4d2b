"""Lowering: optimized Cuvil graphs -> the text of a generated Numba kernel module.

    source = lower_to_source(graph, target="cpu")    # what compile_graph would import

Compiling that module into a callable is `cuvil.runtime.compile_graph`. Names load lazily.
"""

from __future__ import annotations

import importlib

_LAZY = {"lower_to_source": "cuvil.lower.compile",
         "Target": "cuvil.lower.target",
         "get_target": "cuvil.lower.target", "register_target": "cuvil.lower.target"}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'cuvil.lower' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
