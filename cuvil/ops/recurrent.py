"""Recurrent layers: one direction of one LSTM or GRU layer over a whole sequence.

`lstm_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse)` runs torch's LSTM cell over the
time-major sequence `x` [T, B, I] from the state `h0`, `c0` [B, H] (from the last step to
the first when `reverse`). It returns one tensor [2 + T, B, H]: the final hidden state, the
final cell state, then the hidden state of each time step in time order. `gru_layer` is the
same for torch's GRU cell, without a cell state: [1 + T, B, H]. The importer takes
`output`, `h_n` and `c_n` of `nn.LSTM` / `nn.GRU` from these with `slice` and `select`.

Weights and biases are torch's, gates in torch's order (LSTM: i, f, g, o; GRU: r, z, n).
The reference implementation is torch's own one-layer LSTM / GRU.
"""

from __future__ import annotations

import torch

from cuvil.ir.types import TensorType
from cuvil.ops.draw import nn as draw
from cuvil.ops.registry import MISC, AttrSpec, OpDef, check, register

GATES = {"lstm_layer": 4, "gru_layer": 3}
STATES = {"lstm_layer": 2, "gru_layer": 1}  # rows of final state before the sequence


def _recurrent_type(op: str, ts: list[TensorType]) -> TensorType:
    states, gates = STATES[op], GATES[op]
    x, h0 = ts[0], ts[1]
    w_ih, w_hh, b_ih, b_hh = ts[1 + states:]
    check(x.rank == 3, f"{op}: x must be [time, batch, features]")
    check(x.dtype.is_float, f"{op}: inputs must be float")
    hidden = h0.shape[-1] if h0.rank == 2 else None
    check(hidden is not None, f"{op}: the initial state must be [batch, hidden]")
    for s in ts[1:1 + states]:
        check(s.shape == (x.shape[1], hidden), f"{op}: states must be [{x.shape[1]}, {hidden}]")
    check(w_ih.shape == (gates * hidden, x.shape[2]), f"{op}: w_ih must be "
          f"[{gates} * {hidden}, {x.shape[2]}]")
    check(w_hh.shape == (gates * hidden, hidden), f"{op}: w_hh must be "
          f"[{gates} * {hidden}, {hidden}]")
    for b in (b_ih, b_hh):
        check(b.shape == (gates * hidden,), f"{op}: biases must be [{gates} * {hidden}]")
    check(all(t.dtype == x.dtype for t in ts), f"{op}: dtypes differ")
    return TensorType((states + x.shape[0], x.shape[1], hidden), x.dtype, "", x.device)


def _reference(op: str, xs: list[torch.Tensor], a) -> torch.Tensor:
    """torch's one-layer, one-direction LSTM / GRU, its results stacked as the op's."""
    states = STATES[op]
    x = xs[0].flip(0) if a["reverse"] else xs[0]
    hx = [s.unsqueeze(0) for s in xs[1:1 + states]]
    run = torch.lstm if op == "lstm_layer" else torch.gru
    result = run(x, hx if states == 2 else hx[0], list(xs[1 + states:]), True, 1, 0.0, False,
                 False, False)
    seq = result[0].flip(0) if a["reverse"] else result[0]
    return torch.cat([*result[1:], seq]).contiguous()


def _flops(op: str, ts: list[TensorType]) -> object:
    x, h0 = ts[0], ts[1]
    t, b, i = x.shape
    h = h0.shape[-1]
    return 2 * t * b * GATES[op] * h * (i + h) + 10 * t * b * h


for _op, _inputs in [("lstm_layer", ("x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh")),
                     ("gru_layer", ("x", "h0", "w_ih", "w_hh", "b_ih", "b_hh"))]:
    register(OpDef(_op, _inputs, (AttrSpec("reverse", "bool", False),),
                   lambda ts, a, op=_op: _recurrent_type(op, ts),
                   lambda xs, a, op=_op: _reference(op, xs, a), MISC, lowering="recurrent",
                   flops=lambda ts, out, a, op=_op: _flops(op, ts), float_only=True,
                   doc=f"one direction of one {_op[:-6].upper()} layer over a time-major "
                       "sequence: the final state(s), then every step's hidden state",
                   shapes=draw.recurrent))
