"""ONNX LSTM and GRU (as `torch.onnx.export` writes `nn.LSTM` / `nn.GRU`: two layers, both
directions, with and without initial states) import as `lstm_layer` / `gru_layer` nodes
and compute what ONNX Runtime computes on the same file, every output."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import cuvil
from cuvil.errors import CuvilError
from cuvil.onnx import from_onnx

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402
from onnx_models import const, ort_run, tensor, tiny  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self, cell, with_state: bool):
        super().__init__()
        self.rnn = cell(6, 5, num_layers=2, bidirectional=True, batch_first=True)
        self.with_state = with_state

    def forward(self, x, h):
        if not self.with_state:
            return self.rnn(x)
        state = (h, torch.tanh(h)) if isinstance(self.rnn, torch.nn.LSTM) else h
        return self.rnn(x, state)


@pytest.mark.parametrize("cell", [torch.nn.LSTM, torch.nn.GRU])
@pytest.mark.parametrize("with_state", [False, True])
def test_recurrent_layers_match_ort(cell, with_state, tmp_path):
    torch.manual_seed(0)
    model = Net(cell, with_state).eval()
    x, h = torch.randn(3, 7, 6), torch.randn(4, 3, 5)
    path = tmp_path / "rnn.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x, h), str(path), dynamo=False, opset_version=17,
                          input_names=["x", "h"])
    graph = from_onnx(path)
    op = "lstm_layer" if cell is torch.nn.LSTM else "gru_layer"
    assert graph.ops().count(op) == 4
    feeds = (x, h) if with_state else (x,)
    want = ort_run(path, *feeds)
    got = cuvil.run(graph, *feeds)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), w, atol=1e-5)


def test_a_gru_without_linear_before_reset_is_refused():
    w, r = np.ones((1, 6, 2), np.float32), np.ones((1, 6, 2), np.float32)
    model = tiny([helper.make_node("GRU", ["x", "w", "r"], ["y"], name="gru", hidden_size=2)],
                 [tensor("x", [3, 1, 2])], [tensor("y", None)], [const("w", w), const("r", r)])
    with pytest.raises(CuvilError, match=r"^ONNX node 'gru' \(GRU, opset 17\): "
                                         "linear_before_reset=0"):
        from_onnx(model)
