"""Recurrent layers on CUDA: `lstm_layer` and `gru_layer` placed on cuda (both directions)
are lowered by the CUDA recurrent kernel and match the reference executor; nn.LSTM compiled
with `target=["cuda", "cpu"]` keeps its layers on the host (no rule offers them on the
GPU) with the CPU's recurrent kernel, no torch fallback."""

from __future__ import annotations

import pytest
import torch
from cuda_support import check, on_cuda
from torch import nn

import cuvil

T, B, I, H = 3, 2, 3, 4


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("op, gates, states", [("lstm_layer", 4, 2), ("gru_layer", 3, 1)])
def test_recurrent_layer_on_cuda(lower, op, gates, states, reverse):
    shapes = [(T, B, I), *[(B, H)] * states, (gates * H, I), (gates * H, H), (gates * H,),
              (gates * H,)]
    g = on_cuda(shapes, lambda g, *xs: g.add(op, list(xs), {"reverse": reverse}))
    check(g, shapes, lower, {"recurrent"})


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn, self.head = nn.LSTM(8, 16, batch_first=True), nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


def test_lstm_layers_stay_on_the_cpu_with_their_kernel():
    torch.manual_seed(0)
    model, x = Tagger().eval(), torch.randn(2, 5, 8)
    fast = cuvil.compile(model, (x,), target=["cuda", "cpu"], cache=False)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x), atol=1e-5, rtol=1e-5)
    assert not fast.report.fallbacks, fast.report.fallbacks
    (layer,) = [n for n in fast.graph.nodes.values() if n.op == "lstm_layer"]
    assert layer.type.device == "cpu"
    assert any(s.template == "recurrent" for s in fast.report.steps)
