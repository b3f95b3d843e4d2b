"""nn.LSTM and nn.GRU compiled: every layer and direction is one `lstm_layer` /
`gru_layer` node lowered to the runtime's recurrent kernel (no torch fallback), and the
model's outputs (output, (h_n, c_n)) / (output, h_n) match eager: one and two layers,
batch first or not, bidirectional, with and without biases and initial states, f32 and
f64; the batch-first tagger at two batch sizes and two sequence lengths."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils import _pytree as pytree

import cuvil


class Tagger(nn.Module):
    """A two-layer LSTM over [batch, time, 32] and a linear head on every step."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(32, 64, num_layers=2, batch_first=True)
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        out, (h, c) = self.rnn(x)
        return self.head(out), h, c


class Variants(nn.Module):
    """LSTMs and GRUs in the other configurations, each one's every output returned."""

    def __init__(self):
        super().__init__()
        self.lstm_states = nn.LSTM(6, 5, bidirectional=True, bias=False)
        self.lstm_deep = nn.LSTM(6, 4, num_layers=2, bidirectional=True, batch_first=True)
        self.gru_deep = nn.GRU(6, 5, num_layers=2, bidirectional=True, batch_first=True)
        self.gru_state = nn.GRU(6, 3, bias=False)

    def forward(self, x, xb, h0, c0, g0):
        a, (ah, ac) = self.lstm_states(x, (h0, c0))
        b, (bh, bc) = self.lstm_deep(xb)
        c, ch = self.gru_deep(xb)
        d, dh = self.gru_state(x, g0)
        return a, ah, ac, b, bh, bc, c, ch, d, dh


def _compile(model, inputs):
    compiled = cuvil.compile(model, inputs)
    assert not compiled.graph.import_report.fallbacks
    assert not compiled.report.fallbacks
    ops = {n.op for n in compiled.graph.nodes.values()}
    assert ops & {"lstm_layer", "gru_layer"} and "torch_op" not in ops
    return compiled


def _assert_matches(model, compiled, inputs, tol):
    with torch.no_grad():
        want = pytree.tree_leaves(model(*inputs))
    got = pytree.tree_leaves(compiled(*inputs))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=tol, atol=tol)


@pytest.mark.parametrize("steps", [12, 5])
def test_lstm_tagger_matches_eager_at_two_batch_sizes(steps):
    torch.manual_seed(steps)
    model = Tagger().eval()
    compiled = _compile(model, (torch.randn(2, steps, 32),))
    assert "recurrent" in str(compiled.report)
    for batch in (2, 5):
        _assert_matches(model, compiled, (torch.randn(batch, steps, 32),), 1e-5)


def _variant_inputs(batch: int, steps: int, dtype=torch.float32):
    return (torch.randn(steps, batch, 6, dtype=dtype), torch.randn(batch, steps, 6, dtype=dtype),
            torch.randn(2, batch, 5, dtype=dtype), torch.randn(2, batch, 5, dtype=dtype),
            torch.randn(1, batch, 3, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lstm_and_gru_variants_match_eager(dtype):
    torch.manual_seed(0)
    model = Variants().to(dtype).eval()
    compiled = _compile(model, _variant_inputs(3, 4, dtype))
    layers = [n for n in compiled.graph.nodes.values() if n.op in ("lstm_layer", "gru_layer")]
    assert len(layers) == 2 + 4 + 4 + 1  # one per layer and direction
    assert sum(n.attrs["reverse"] for n in layers) == 5
    for _ in range(2):  # x is time-major: torch.export takes its dim 0 as the batch
        _assert_matches(model, compiled, _variant_inputs(3, 4, dtype),
                        1e-5 if dtype == torch.float32 else 1e-12)


def test_dropout_between_layers_is_off_in_eval_mode():
    torch.manual_seed(1)
    model = nn.GRU(4, 3, num_layers=2, dropout=0.5).eval()
    inputs = (torch.randn(3, 2, 4),)
    _assert_matches(model, _compile(model, inputs), inputs, 1e-5)
