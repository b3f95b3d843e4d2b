"""A run-time convolution weight arranged per call (`kernels/conv_weights.py`) as lowering
arranges a constant one, and convolutions whose weight is a graph input (a training graph's)
compiled on the direct and Winograd drivers against torch's conv2d: odd shapes, stride 2,
padding, batch 1, an epilogue; the others run in torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import cuvil
from cuvil.targets.cpu.kernels.conv_weights import direct_weight, winograd_weight_of
from cuvil.targets.cpu.templates.conv import winograd_weight


def test_arranged_weights_equal_lowerings():
    w = np.random.default_rng(0).standard_normal((5, 3, 3, 3)).astype(np.float32)
    np.testing.assert_array_equal(direct_weight(w), w.reshape(5, -1).T)
    np.testing.assert_allclose(winograd_weight_of(w), winograd_weight(w), rtol=1e-6, atol=0)


class ConvBiasRelu(torch.nn.Module):
    """relu(conv2d(x, w) + b), w and b inputs."""

    def __init__(self, stride, padding):
        super().__init__()
        self.stride, self.padding = stride, padding

    def forward(self, x, w, b):
        y = F.conv2d(x, w, stride=self.stride, padding=self.padding)
        return (y + b.view(1, -1, 1, 1)).relu()


CASES = [  # x shape, out channels, kernel, stride, padding, the note of the kernel expected
    ((1, 3, 37, 35), 5, 7, 2, 3, "direct"),
    ((2, 3, 34, 40), 7, 3, (2, 1), 1, "direct"),
    ((3, 8, 20, 36), 9, 3, 1, 1, "Winograd"),
    ((1, 16, 18, 32), 16, 3, 1, 1, "Winograd"),
    ((2, 16, 9, 9), 8, 3, 2, 1, None),  # rows of 5: torch's
]


@pytest.mark.parametrize("shape, oc, k, stride, padding, kind", CASES)
def test_convolution_with_an_input_weight_matches_torch(shape, oc, k, stride, padding, kind):
    torch.manual_seed(0)
    model = ConvBiasRelu(stride, padding)
    inputs = (torch.randn(shape), torch.randn(oc, shape[1], k, k) * 0.3, torch.randn(oc))
    compiled = cuvil.compile(model, inputs)
    notes = [kernel.note for kernel in compiled.report.kernels if kernel.template == "conv"]
    if kind is None:
        assert not notes and compiled.report.fallbacks
    else:
        assert notes and kind in notes[0] and not compiled.report.fallbacks
    for seed in (1, 2):  # new weights each call: nothing of the first is kept
        torch.manual_seed(seed)
        fresh = (torch.randn(shape), torch.randn(oc, shape[1], k, k) * 0.3, torch.randn(oc))
        torch.testing.assert_close(compiled(*fresh), model(*fresh), rtol=1e-4, atol=1e-4)
