"""A max pool's training ops as Cuvil kernels (`templates/pool_indices.py`): the indices of
`max_pool2d_with_indices` and `max_pool2d_with_indices_backward`, compiled from torch, equal
to torch's exactly (ties, NaN and -inf included), with no fallback."""

from __future__ import annotations

import pytest
import torch

import cuvil

GEOMETRIES = [  # kernel, stride, padding, dilation, ceil_mode, input shape
    ((3, 3), (2, 2), (1, 1), (1, 1), False, (1, 3, 9, 9)),
    ((2, 2), (2, 2), (0, 0), (1, 1), True, (2, 4, 7, 5)),
    ((3, 2), (1, 2), (1, 1), (2, 1), False, (3, 2, 8, 6)),
    ((2, 3), (3, 1), (0, 1), (1, 2), True, (1, 1, 10, 7)),
    ((2, 2), (2, 2), (0, 0), (1, 1), False, (2, 3, 8, 7)),  # windows inside the image
    ((3, 3), (2, 2), (0, 0), (1, 1), False, (1, 2, 9, 8)),
    ((3, 2), (1, 2), (0, 0), (1, 1), False, (2, 2, 9, 8)),
    ((4, 4), (4, 4), (0, 0), (1, 1), False, (2, 3, 16, 12)),
]


class PoolStep(torch.nn.Module):
    """A max pool's values and indices, and the input gradient of `g` through them."""

    def __init__(self, k, s, p, d, ceil):
        super().__init__()
        self.geometry = [list(k), list(s), list(p), list(d), ceil]

    def forward(self, x, g):
        y, indices = torch.ops.aten.max_pool2d_with_indices(x, *self.geometry)
        grad = torch.ops.aten.max_pool2d_with_indices_backward(g, x, *self.geometry, indices)
        return y, indices, grad


def tricky(shape) -> torch.Tensor:
    """Few distinct values (ties), NaNs (in the first plane and the last) and -infs."""
    x = torch.randint(0, 3, shape).float()
    x.view(-1)[::7] = float("-inf")
    x.view(-1)[5] = float("nan")
    x.view(-1)[-4] = float("nan")
    return x


@pytest.mark.parametrize("k, s, p, d, ceil, shape", GEOMETRIES)
def test_indices_and_gradient_equal_torch(k, s, p, d, ceil, shape):
    torch.manual_seed(0)
    model = PoolStep(k, s, p, d, ceil)
    x = tricky(shape)
    y = torch.ops.aten.max_pool2d_with_indices(x, *model.geometry)[0]
    g = torch.randn(y.shape)
    compiled = cuvil.compile(model, (x, g))
    assert not compiled.report.fallbacks, compiled.report.fallbacks
    for inputs in ((x, g), (torch.randn(shape), torch.randn(y.shape))):
        for got, want in zip(compiled(*inputs), model(*inputs), strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
