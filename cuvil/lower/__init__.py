"""Lowering: optimized Cuvil graphs -> the text of a generated Numba kernel module.

    source = lower_to_source(graph, target="cpu")    # what compile_graph would import

Compiling that module into a callable is `cuvil.runtime.compile_graph`. Names load lazily.
"""

from __future__ import annotations

__all__ = ["lower_to_source", "Target", "CpuTarget", "get_target", "register_target"]


def __getattr__(name: str):
    if name == "lower_to_source":
        from cuvil.lower.compile import lower_to_source

        return lower_to_source
    if name in ("Target", "CpuTarget", "get_target", "register_target"):
        import cuvil.lower.target

        return getattr(cuvil.lower.target, name)
    raise AttributeError(f"module 'cuvil.lower' has no attribute {name!r}")
