"""Backward aten ops that map to catalog ops: `threshold_backward` (ReLU's gradient) is a
masked fill, no torch fallback, and matches eager at the threshold, below, above and on
NaN."""

from __future__ import annotations

import pytest
import torch

import cuvil


class ThresholdBackward(torch.nn.Module):
    def __init__(self, threshold: float):
        super().__init__()
        self.threshold = threshold

    def forward(self, grad, x):
        return torch.ops.aten.threshold_backward(grad, x, self.threshold) * 2.0


@pytest.mark.parametrize("threshold", [0.0, 0.5])
def test_threshold_backward_is_a_masked_fill_with_eagers_values(threshold):
    model = ThresholdBackward(threshold)
    grad, x = torch.randn(4, 3, 5), torch.randn(4, 3, 5)
    x[0, 0, :3] = torch.tensor([threshold, float("nan"), threshold + 1e-6])
    graph = cuvil.from_torch(model, (grad, x))
    assert "torch_op" not in graph.ops() and "masked_fill" in graph.ops()
    compiled = cuvil.compile(model, (grad, x))
    torch.testing.assert_close(compiled(grad, x), model(grad, x), rtol=0, atol=0)
