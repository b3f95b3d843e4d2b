"""The ONNX -> Cuvil mapping of LSTM and GRU: each direction becomes one `lstm_layer` /
`gru_layer` node (`ops/recurrent.py`, torch's cells) over the time-major sequence, its
weights regrouped at import from ONNX's gate order into torch's (LSTM: i,o,f,c -> i,f,c,o;
GRU: z,r,h -> r,z,h). `Y`, `Y_h` and `Y_c` are sliced and selected from the results. Part
of `ops.ONNX`; weights must be initializers, and only torch's cell semantics map (default
activations, no clip, no peepholes or sequence lengths, GRU's `linear_before_reset=1`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from cuvil.frontend.converter import Value
from cuvil.onnx.importer import need
from cuvil.onnx.ops_shape import known_as

if TYPE_CHECKING:
    from cuvil.onnx.importer import OnnxImporter

Names = list[str]
# torch's gate k is ONNX's gate ORDER[op][k]
ORDER = {"lstm_layer": [0, 2, 3, 1], "gru_layer": [1, 0, 2]}
STATES = {"lstm_layer": 2, "gru_layer": 1}


def _check(ix: OnnxImporter, op: str, xs: Names) -> None:
    need(ix.attrs.get("layout", 0) == 0, "a batch-major layout")
    need("clip" not in ix.attrs and "activations" not in ix.attrs,
         "clip or activations other than the defaults")
    need(len(xs) < 5 or not xs[4], "sequence_lens")
    need(len(xs) < 8 or not xs[7], "peepholes")
    need(not ix.attrs.get("input_forget"), "input_forget")
    if op == "gru_layer":
        need(ix.attrs.get("linear_before_reset", 0) == 1, "linear_before_reset=0")
    need(all(ix.constant(xs, i) is not None for i in (1, 2)), "weights computed at run time")


def _regrouped(ix: OnnxImporter, op: str, name: str, d: int, hidden: int) -> list[Value]:
    """Direction `d`'s gates of weight or bias `name`, in torch's order (as constants)."""
    array = ix.known[name][d]
    gates = len(ORDER[op])
    parts = np.split(array, array.shape[0] // hidden, axis=0)
    chunks = [parts[i] for i in ORDER[op]]
    if len(parts) == 2 * gates:  # B: the input biases, then the recurrent ones
        chunks += [parts[gates + i] for i in ORDER[op]]
    out = np.concatenate(chunks, axis=0)
    halves = [out] if len(parts) == gates else np.split(out, 2, axis=0)
    return [ix.tensor(known_as(ix, f"{name}.{op}.{d}.{i}", h)) for i, h in enumerate(halves)]


def _state(ix: OnnxImporter, xs: Names, i: int, d: int, batch, hidden: int, x: Value) -> Value:
    if i < len(xs) and xs[i]:
        return ix.add("select", [ix.tensor(xs[i])], {"dim": 0, "index": d})
    zero = Value(ix.graph.scalar(0.0, dtype=ix.type(x).dtype))
    return ix.add("expand", [zero], {"shape": (batch, hidden)})


def recurrent(op: str) -> Callable:
    def convert(ix: OnnxImporter, xs: Names) -> tuple[Value, ...]:
        _check(ix, op, xs)
        x, hidden = ix.tensor(xs[0]), ix.attrs["hidden_size"]
        direction = ix.attrs.get("direction", "forward")
        dirs = [1] if direction == "reverse" else [0, 1] if direction == "bidirectional" \
            else [0]
        batch = ix.type(x).shape[1]
        states = [5, 6][:STATES[op]]  # initial_h, initial_c
        seqs, finals = [], [[] for _ in states]
        for d, reverse in enumerate(dirs):
            bias = _regrouped(ix, op, xs[3], d, hidden) if len(xs) > 3 and xs[3] else \
                [ix.tensor(known_as(ix, f"zeros.{op}.{hidden}", np.zeros(
                    len(ORDER[op]) * hidden, ix.known[xs[1]].dtype)))] * 2
            y = ix.add(op, [x, *(_state(ix, xs, i, d, batch, hidden, x) for i in states),
                            *_regrouped(ix, op, xs[1], d, hidden),
                            *_regrouped(ix, op, xs[2], d, hidden), *bias],
                       {"reverse": bool(reverse)})
            seq = ix.add("slice", [y], {"dim": 0, "start": len(states)})
            seqs.append(ix.add("unsqueeze", [seq], {"dim": 1}))
            for k, final in enumerate(finals):
                row = ix.add("select", [y], {"dim": 0, "index": k})
                final.append(ix.add("unsqueeze", [row], {"dim": 0}))
        out = [seqs] + finals
        return tuple(v[0] if len(v) == 1 else ix.add("cat", v, {"dim": 1 if i == 0 else 0})
                     for i, v in enumerate(out))

    return convert


RECURRENT_OPS = {"LSTM": recurrent("lstm_layer"), "GRU": recurrent("gru_layer")}
