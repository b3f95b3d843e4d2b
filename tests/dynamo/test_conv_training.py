"""tests/dynamo/test_conv_training.py: convolutions of training graphs, whose weights are
graph inputs rather than constants: they stay in NCHW (the NHWC conversion rules need a
constant weight, which the NHWC kernels take pre-packed), run on Cuvil's kernels where
those are faster than torch's (the weight arranged at each call) and in torch elsewhere,
and compute what torch computes.
"""

from __future__ import annotations

import torch
from torch import nn

import cuvil


class TwoConvs(nn.Module):
    """Three 3x3 convolutions of 64 channels on 8x8 (NHWC's case with constant weights),
    whose weights are inputs."""

    def forward(self, x, w1, w2):
        y = nn.functional.conv2d(x, w1, padding=1).relu()
        y = nn.functional.conv2d(y, w2, padding=1).relu()
        return nn.functional.conv2d(y, w1, padding=1, stride=2)


def test_a_convolution_with_an_input_weight_keeps_nchw():
    torch.manual_seed(0)
    scale = (64 * 9) ** -0.5  # values of order 1, as an initialised network's
    inputs = (torch.randn(2, 64, 8, 8), torch.randn(64, 64, 3, 3) * scale,
              torch.randn(64, 64, 3, 3) * scale)
    compiled = cuvil.compile(TwoConvs(), inputs)
    assert not [n for n in compiled.graph.nodes if compiled.graph[n].op == "to_layout"]
    torch.testing.assert_close(compiled(*inputs), TwoConvs()(*inputs), rtol=1e-4, atol=1e-4)
