"""Graphs and kernels the runtime tests share."""

from __future__ import annotations

import torch

from cuvil.ir import Graph, TensorType, sym

B = sym("batch")

# a module with one cached Numba kernel: kernel(4) == 13
KERNEL_SOURCE = """
from numba import njit

@njit(cache=True)
def kernel(a):
    return a * 3 + 1
"""


def t(*shape, dtype="f32", layout=""):
    return TensorType(shape, dtype, layout)


def mlp_graph(width: int = 32) -> Graph:
    """x [batch, 16] -> linear + relu -> linear, outputs (y, {"hidden": h, "x": [x]})."""
    torch.manual_seed(0)
    g = Graph("mlp")
    x = g.input("x", t(B, 16))
    w1, b1 = g.const(torch.randn(16, width) * 0.3, "w1"), g.const(torch.randn(width), "b1")
    h = g.add("relu", [g.add("add", [g.add("matmul", [x, w1]), b1])])
    w2 = g.const(torch.randn(width, 4) * 0.3, "w2")
    y = g.add("matmul", [h, w2])
    g.set_outputs((y, {"hidden": h, "x": [x]}))
    return g
