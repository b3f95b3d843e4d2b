"""Cuvil IR: typed values (shape, dtype, layout, device) and the graph of ops over them.

Names are imported on first use, so that `cuvil.ir.structure` is importable without sympy
(the program cache's warm path, `cuvil/cache/programs.py`, never imports the IR)."""

from __future__ import annotations

_HOMES = {
    "Graph": "graph", "Node": "graph", "flatten": "structure", "unflatten": "structure",
    "place_on": "place",
    **{name: "types" for name in ("CONTIGUOUS", "NCHW", "NHWC", "Dim", "DType", "TensorType",
                                  "default_layout", "eval_dim", "is_static", "parse_dim",
                                  "sym")},
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home == "graph":
        import cuvil.ir.graph as module
    elif home == "structure":
        import cuvil.ir.structure as module
    elif home == "types":
        import cuvil.ir.types as module
    elif home == "place":
        import cuvil.ir.place as module
    else:
        raise AttributeError(f"module 'cuvil.ir' has no attribute {name!r}")
    return getattr(module, name)
