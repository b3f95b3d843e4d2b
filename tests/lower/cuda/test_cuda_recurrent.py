"""nn.LSTM with `target=["cuda", "cpu"]`: the CUDA target has no recurrent kernel and no
rule offers one there, so each layer stays on the CPU with its own recurrent kernel (no
torch fallback) while the linear head may move to the GPU."""

from __future__ import annotations

import torch
from torch import nn

import cuvil


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
