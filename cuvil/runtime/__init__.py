"""The compiled runtime: `compile_graph`, memory plan, kernel-module cache, thread policy,
`CompiledGraph`.

    compiled = compile_graph(graph, target="cpu", fallback=True, threads=None)
    y = compiled(x)            # torch tensors or numpy arrays in, torch tensors out
    print(compiled.source)     # the generated kernels
    print(compiled.report)     # kernels, compile times, fallbacks, memory plan

Names load lazily: importing the package imports neither Numba nor torch.
"""

from __future__ import annotations

__all__ = ["compile_graph", "CompiledGraph", "CompileReport", "FallbackReport", "KernelReport"]


def __getattr__(name: str):
    if name == "compile_graph":
        from cuvil.runtime.build import compile_graph

        return compile_graph
    if name == "CompiledGraph":
        from cuvil.runtime.compiled import CompiledGraph

        return CompiledGraph
    if name in ("CompileReport", "FallbackReport", "KernelReport"):
        import cuvil.lower.report

        return getattr(cuvil.lower.report, name)
    raise AttributeError(f"module 'cuvil.runtime' has no attribute {name!r}")
