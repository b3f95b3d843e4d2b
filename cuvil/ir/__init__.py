"""Cuvil IR: typed values (shape, dtype, layout, device) and the graph of ops over them."""

from cuvil.ir.graph import Graph, Node, flatten, unflatten
from cuvil.ir.types import (
    CONTIGUOUS,
    NCHW,
    NHWC,
    Dim,
    DType,
    TensorType,
    default_layout,
    eval_dim,
    is_static,
    parse_dim,
    sym,
)

__all__ = [
    "CONTIGUOUS", "NCHW", "NHWC", "Dim", "DType", "Graph", "Node", "TensorType",
    "default_layout", "eval_dim", "flatten", "is_static", "parse_dim", "sym", "unflatten",
]
