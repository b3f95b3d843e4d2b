"""`lstm_layer` / `gru_layer` export as ONNX LSTM / GRU: an optimized nn.LSTM or nn.GRU
model (1 and 2 layers, bidirectional, batch-first) written by `to_onnx` passes the full
ONNX checker and matches torch eager in ONNX Runtime within 1e-4, at a batch other than the
example's where the batch is symbolic."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import cuvil
from cuvil.onnx import to_onnx

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


class Recurrent(torch.nn.Module):
    def __init__(self, cls, layers: int, bidirectional: bool, batch_first: bool):
        super().__init__()
        self.rnn = cls(4, 5, num_layers=layers, bidirectional=bidirectional,
                       batch_first=batch_first)

    def forward(self, x):
        y, state = self.rnn(x)
        return (y, *state) if isinstance(state, tuple) else (y, state)


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU], ids=["lstm", "gru"])
@pytest.mark.parametrize("layers, bidirectional, batch_first",
                         [(1, False, False), (2, True, True), (1, True, False)])
def test_recurrent_model_exports_and_runs_in_ort_as_eager(cls, layers, bidirectional,
                                                          batch_first, tmp_path):
    torch.manual_seed(0)
    model = Recurrent(cls, layers, bidirectional, batch_first).eval()
    shape = (2, 3, 4) if batch_first else (3, 2, 4)
    graph = cuvil.optimize(model, (torch.randn(*shape),))
    path = tmp_path / "rnn.onnx"
    proto = to_onnx(graph, path)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    assert {"LSTM" if cls is torch.nn.LSTM else "GRU"} <= {n.op_type for n in proto.graph.node}
    symbolic = proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param
    x = torch.randn(shape[0] + (2 if symbolic else 0), *shape[1:])
    with torch.no_grad():
        want = model(x)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    assert len(got) == len(want)
    for g, e in zip(got, want, strict=True):
        np.testing.assert_allclose(g, e.numpy(), atol=1e-4, rtol=1e-4)
