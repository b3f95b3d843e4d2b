"""The compiled runtime: `compile_graph`, memory plan, kernel-module cache, thread policy,
`CompiledGraph`.

    compiled = compile_graph(graph, target="cpu", fallback=True, threads=None)
    y = compiled(x)            # torch tensors or numpy arrays in, torch tensors out
    print(compiled.source)     # the generated kernels
    print(compiled.report)     # kernels, compile times, fallbacks, memory plan

Names load lazily: importing the package imports neither Numba nor torch.
"""

from __future__ import annotations

import importlib

_LAZY = {"compile_graph": "cuvil.runtime.build", "CompiledGraph": "cuvil.runtime.compiled",
         "CompileReport": "cuvil.lower.report", "FallbackReport": "cuvil.lower.report",
         "KernelReport": "cuvil.lower.report"}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'cuvil.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
