"""The Cuvil -> ONNX mapping of `lstm_layer` and `gru_layer` (`ops/recurrent.py`), for the
exporter: each node becomes one ONNX LSTM / GRU of one direction (`reverse`), its weights
regrouped from torch's gate order into ONNX's (LSTM: i,f,c,o -> i,o,f,c; GRU: r,z,h ->
z,r,h; the inverse of the importer's `ops_recurrent`), GRU with `linear_before_reset=1`
(torch's cell). The node's one result [states + T, B, H] is the Concat of ONNX's final
states `Y_h` (`Y_c`) and its sequence `Y` with the num_directions axis squeezed out.
Constant weights are regrouped in the file; others by a Gather at run time.
"""

from __future__ import annotations

import numpy as np

from cuvil.ir.graph import Node
from cuvil.onnx.export import Writer

# ONNX's gate j is torch's gate ONNX_ORDER[op][j]
ONNX_ORDER = {"lstm_layer": [0, 3, 1, 2], "gru_layer": [1, 0, 2]}
STATES = {"lstm_layer": 2, "gru_layer": 1}
ONNX_OP = {"lstm_layer": "LSTM", "gru_layer": "GRU"}


def _weights(w: Writer, names: tuple[str, ...], op: str, hidden: int) -> str:
    """Tensors `names` regrouped into ONNX's gate order and concatenated along axis 0, with
    a leading num_directions axis of 1."""
    rows = np.concatenate([np.arange(j * hidden, (j + 1) * hidden) for j in ONNX_ORDER[op]])
    nodes = [w.graph[n] for n in names]
    if all(n.op == "const" for n in nodes):
        arrays = [w.graph.constants[n.attrs["ref"]].detach().cpu().numpy()[rows]
                  for n in nodes]
        return w.initializer(np.concatenate(arrays)[None])
    parts = [w.add("Gather", [w.arg(n), w.ints(list(rows))], axis=0) for n in names]
    cat = parts[0] if len(parts) == 1 else w.add("Concat", parts, axis=0)
    return w.add("Unsqueeze", [cat, w.ints([0])])


def recurrent(w: Writer, node: Node) -> None:
    op, states = node.op, STATES[node.op]
    x, *rest = node.inputs
    w_ih, w_hh, b_ih, b_hh = rest[states:]
    hidden = node.type.shape[-1]
    initial = [w.add("Unsqueeze", [w.arg(s), w.ints([0])]) for s in rest[:states]]
    args = [w.arg(x), _weights(w, (w_ih,), op, hidden), _weights(w, (w_hh,), op, hidden),
            _weights(w, (b_ih, b_hh), op, hidden), "", *initial]
    outs = [w.fresh("y") for _ in range(1 + states)]
    extra = {"linear_before_reset": 1} if op == "gru_layer" else {}
    w.nodes.append(w.helper.make_node(
        ONNX_OP[op], args, outs, name=f"{node.name}/{ONNX_OP[op]}", hidden_size=hidden,
        direction="reverse" if node.attrs["reverse"] else "forward", **extra))
    seq = w.add("Squeeze", [outs[0], w.ints([1])])
    w.add("Concat", [*outs[1:], seq], out=node.name, axis=0)
