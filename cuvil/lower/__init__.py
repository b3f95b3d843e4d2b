"""Lowering: optimized Cuvil graphs -> generated Numba kernels -> a `CompiledGraph`.

    compiled = compile_graph(graph, target="cpu", fallback=True, threads=None)
    y = compiled(x)            # torch tensors or numpy arrays in, torch tensors out
    print(compiled.source)     # the generated kernels
    print(compiled.report)     # kernels, compile times, fallbacks, memory plan

Names load lazily, so that `cuvil.runtime` may use the lowering helpers it shares.
"""

from __future__ import annotations

import importlib

_LAZY = {"compile_graph": "cuvil.lower.compile", "lower_to_source": "cuvil.lower.compile",
         "Target": "cuvil.lower.target", "CpuTarget": "cuvil.lower.target",
         "get_target": "cuvil.lower.target", "register_target": "cuvil.lower.target"}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'cuvil.lower' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
