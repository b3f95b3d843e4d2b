"""Lowering: optimized Cuvil graphs -> generated Numba kernels -> a `CompiledGraph`.

    compiled = compile_graph(graph, target="cpu", fallback=True, threads=None)
    y = compiled(x)            # torch tensors or numpy arrays in, torch tensors out
    print(compiled.source)     # the generated kernels
    print(compiled.report)     # kernels, compile times, fallbacks, memory plan
"""

from cuvil.lower.compile import compile_graph, lower_to_source
from cuvil.lower.target import Target, get_target, register_target

__all__ = ["Target", "compile_graph", "get_target", "lower_to_source", "register_target"]
