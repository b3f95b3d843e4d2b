"""The compiled runtime: `compile_graph`, memory plan, kernel-module cache, thread policy,
`CompiledGraph`.

    compiled = compile_graph(graph, target="cpu", fallback=True, threads=None)
    compiled = build_program(lower(graph, target="cpu"))  # the same, as two passes
    y = compiled(x)            # torch tensors or numpy arrays in, torch tensors out
    print(compiled.source)     # the generated kernels
    print(compiled.report)     # kernels, compile times, fallbacks, memory plan

Names load lazily: importing the package imports neither Numba nor torch, and `lower`
and `build_program` bring the IR and the lowering (sympy, ~1 s) only to a compile that lowers.
"""

from __future__ import annotations

__all__ = ["build_program", "compile_graph", "CompiledGraph", "CompileReport", "FallbackReport",
           "KernelReport", "Lowering", "lower"]


def __getattr__(name: str):
    if name in ("build_program", "compile_graph"):
        from cuvil.runtime import build

        return getattr(build, name)
    if name in ("Lowering", "lower"):
        from cuvil.runtime import lowering

        return getattr(lowering, name)
    if name == "CompiledGraph":
        from cuvil.runtime.compiled import CompiledGraph

        return CompiledGraph
    if name in ("CompileReport", "FallbackReport", "KernelReport"):
        from cuvil.lower import report

        return getattr(report, name)
    raise AttributeError(f"module 'cuvil.runtime' has no attribute {name!r}")
