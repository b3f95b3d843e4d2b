"""LSTM and GRU layers (`lstm_layer`, `gru_layer`): each is the runtime's `lstm_layer_run`
or `gru_layer_run` itself (`kernels.recurrent`), compiled once per installation; the
direction travels as a one-element array."""

from __future__ import annotations

import numpy as np

from cuvil.ir.types import DType
from cuvil.lower.physical import layout_perm
from cuvil.lower.spec import KernelSpec, Unsupported

PARAMS = {"lstm_layer": ["x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"],
          "gru_layer": ["x", "h0", "w_ih", "w_hh", "b_ih", "b_hh"]}


def generate(group, ctx) -> KernelSpec:
    nodes = group.node_list(ctx)
    node = nodes[-1]
    if len(nodes) != 1 or node.op not in PARAMS:
        raise Unsupported("a recurrent kernel computes one lstm_layer or gru_layer")
    for v in (*node.inputs, node.name):
        t = ctx.type(v)
        if t.dtype not in (DType.f32, DType.f64):
            raise Unsupported(f"{node.op}: the recurrent kernel takes f32 or f64, not {t.dtype}")
        if layout_perm(t) != tuple(range(t.rank)):
            raise Unsupported(f"{node.op}: {v} is not in logical order")
    rev = int(bool(node.attrs["reverse"]))
    flag = ctx.prepare(f"recurrent.reverse.{rev}", np.array([rev], np.int64))
    return KernelSpec("recurrent", [*PARAMS[node.op], "rev", "out"],
                      [*node.inputs, flag, node.name], [], parallel=False,
                      note=node.op + (" (reverse)" if rev else ""),
                      library=f"{node.op}_run")
