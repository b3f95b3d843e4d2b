"""The aten -> Cuvil mapping of `nn.LSTM` and `nn.GRU` (`aten.lstm.input`,
`aten.gru.input`): each layer and direction becomes one `lstm_layer` / `gru_layer` node
(`ops/recurrent.py`) over the time-major sequence; `output`, `h_n` and `c_n` are sliced and
selected from their results. Part of `aten.ATEN`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from cuvil.frontend.converter import Args, Value, need

if TYPE_CHECKING:
    from cuvil.frontend.importer import Importer


def recurrent(op: str) -> Callable:
    """lstm / gru: layers in turn, both directions of a bidirectional layer concatenated
    along the features; a packed sequence, projections or training dropout fall back."""

    def convert(ix: Importer, a: Args) -> tuple[Value, ...]:
        need(isinstance(a.get("input"), Value), "a packed sequence")
        need(not a["train"] or a["dropout"] == 0, "dropout between layers in training")
        hx = a["hx"]
        states = list(hx) if isinstance(hx, tuple | list) else [hx]
        dirs, per = (2 if a["bidirectional"] else 1), (4 if a["has_biases"] else 2)
        need(len(a["params"]) == a["num_layers"] * dirs * per, "projections (proj_size)")
        x = a["input"]
        if a["batch_first"]:
            x = ix.add("transpose", [x], {"dim0": 0, "dim1": 1})
        finals: list[list[Value]] = [[] for _ in states]
        for layer in range(a["num_layers"]):
            outs = []
            for d in range(dirs):
                k = layer * dirs + d
                y = ix.add(op, [x, *(ix.add("select", [s], {"dim": 0, "index": k})
                                     for s in states),
                                *_weights(ix, a["params"][k * per:(k + 1) * per])],
                           {"reverse": d == 1})
                outs.append(ix.add("slice", [y], {"dim": 0, "start": len(states)}))
                for i, final in enumerate(finals):
                    row = ix.add("select", [y], {"dim": 0, "index": i})
                    final.append(ix.add("unsqueeze", [row], {"dim": 0}))
            x = outs[0] if dirs == 1 else ix.add("cat", outs, {"dim": 2})
        if a["batch_first"]:
            x = ix.add("transpose", [x], {"dim0": 0, "dim1": 1})
        return (x, *(f[0] if len(f) == 1 else ix.add("cat", f, {"dim": 0}) for f in finals))

    return convert


def _weights(ix: Importer, params: Any) -> list[Value]:
    """w_ih, w_hh, b_ih, b_hh of one layer and direction; zeros for absent biases."""
    if len(params) == 4:
        return list(params)
    w = ix.constant(params[0])
    gates = ix.type(params[0]).shape[0]
    dtype = w.dtype if w is not None else torch.float32
    zeros = ix.folded(torch.zeros(gates, dtype=dtype), f"zeros_{gates}_{str(dtype)[6:]}")
    return [*params, zeros, zeros]


RECURRENT_OPS = {"lstm": recurrent("lstm_layer"), "gru": recurrent("gru_layer")}
