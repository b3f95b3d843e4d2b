"""Backward aten ops that map to catalog ops: `threshold_backward` (ReLU's gradient) is a
masked fill, no torch fallback, and matches eager at the threshold, below, above and on
NaN; `select_backward` (`select`'s and `unbind`'s gradient) is a `cat` with zeros, and the
sum of one per index of a dim (q, k and v's gradients into one projection) a single `cat`
of the gradients, with eager's values."""

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


class SelectBackwardSum(torch.nn.Module):
    """The gradients of `unbind`'s results summed into the gradient of its input, as
    AOTAutograd's backward of `q, k, v = qkv.unbind(0)` sums them, in any order."""

    def __init__(self, order: tuple[int, ...], size: int = 3):
        super().__init__()
        self.order, self.size = order, size

    def forward(self, *grads):
        shape = [self.size, *grads[0].shape]
        terms = [torch.ops.aten.select_backward(g, shape, 0, i)
                 for g, i in zip(grads, self.order, strict=True)]
        total = terms[0]
        for term in terms[1:]:
            total = total + term
        return total * 2.0


@pytest.mark.parametrize("order, size", [((2, 1, 0), 3), ((0, 1, 2), 3), ((1,), 3),
                                         ((3, 0), 4)], ids=["all", "in-order", "one", "gaps"])
def test_select_backward_sums_are_one_cat_with_eagers_values(order, size):
    model = SelectBackwardSum(order, size)
    grads = tuple(torch.randn(4, 2, 5) for _ in order)
    graph = cuvil.from_torch(model, grads)
    assert "torch_op" not in graph.ops() and "cat" in graph.ops()
    if len(order) == size:
        assert "add" not in graph.ops()
    compiled = cuvil.compile(model, grads)
    torch.testing.assert_close(compiled(*grads), model(*grads), rtol=0, atol=0)
