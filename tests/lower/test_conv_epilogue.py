"""NCHW convolutions whose generated epilogue (bias, residual, tanh: not the common one
that `runtime.conv_post` applies) runs per image, right after that image's product, on
threads that split the batch: the direct f32 tile (1x1, an RGB stem, 3x3, a patch
embedding, channels that are not whole tiles) and im2col (rows too short for the tile),
against torch eager, on both branches (enough images and work for the split, and a single
image, which takes the whole-batch driver)."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

import cuvil

# The stock rules fuse only the common epilogue (bias, residual, ReLU/ReLU6), which a runtime
# driver applies; a tanh joins the convolution through ops of the test's own.
TANH_RULES = """
ruleset fusion_conv_tanh
op conv2d_bias_tanh(x, w, b, stride, padding, dilation, groups) =
    tanh(conv2d_bias(x, w, b, stride, padding, dilation, groups)) kernel conv
op conv2d_bias_add_tanh(x, w, b, r, stride, padding, dilation, groups) =
    tanh(conv2d_bias_add(x, w, b, r, stride, padding, dilation, groups)) kernel conv
rule conv_bias_tanh: tanh(conv2d_bias(x, w, b, s, p, d, g))
    => conv2d_bias_tanh(x, w, b, s, p, d, g)
rule conv_bias_add_tanh: tanh(conv2d_bias_add(x, w, b, r, s, p, d, g))
    => conv2d_bias_add_tanh(x, w, b, r, s, p, d, g)
"""
RULES = [None, TANH_RULES]


class ConvResidual(nn.Module):
    """tanh(conv(x) + b + x) when the shapes allow a residual, else tanh(conv(x) + b)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride, 0 if kernel == stride else kernel // 2)
        self.residual = cin == cout and stride == 1

    def forward(self, x):
        y = self.conv(x)
        return torch.tanh(y + x if self.residual else y)


CASES = {  # name -> (cin, cout, kernel, stride, size, driver)
    "1x1": (16, 64, 1, 1, 16, "conv2d_nchw_direct"),
    "1x1 residual": (32, 32, 1, 1, 16, "conv2d_nchw_direct"),
    "rgb stem": (3, 16, 3, 1, 32, "conv2d_nchw_direct"),
    "3x3 residual, 12 channels, odd rows": (12, 12, 3, 1, 19, "conv2d_nchw_direct"),
    "3x3 residual, 12 channels": (12, 12, 3, 1, 20, "conv2d_nchw_winograd"),
    "patch embedding": (3, 20, 4, 4, 64, "conv2d_nchw_direct"),
    "stride 2, rows of 8 two to a vector": (16, 32, 3, 2, 16, "conv2d_nchw_direct"),
    "im2col stride 2, rows of 12": (16, 32, 3, 2, 24, "conv2d_nchw"),
}


@pytest.mark.parametrize("case", CASES)
def test_per_image_epilogue_matches_torch(case):
    cin, cout, kernel, stride, size, driver = CASES[case]
    torch.manual_seed(0)
    model = ConvResidual(cin, cout, kernel, stride).eval()
    compiled = cuvil.compile(model, (torch.randn(2, cin, size, size),), threads=2,
                             rules=RULES)
    assert not compiled.report.fallbacks
    assert "epilogue per image" in compiled.source
    assert f"{driver}(" in compiled.source
    in_prange = compiled.source.split("prange(", 1)[1]
    assert not re.search(r"\(\d+, \d+, \d+", in_prange), "a tuple literal inside the prange"
    for batch in (8, 1):
        x = torch.randn(batch, cin, size, size)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("case", ["1x1", "im2col stride 2, rows of 12"])
def test_one_thread_applies_each_epilogue_in_a_plain_loop(case):
    cin, cout, kernel, stride, size, driver = CASES[case]
    torch.manual_seed(0)
    model = ConvResidual(cin, cout, kernel, stride).eval()
    compiled = cuvil.compile(model, (torch.randn(2, cin, size, size),), threads=1,
                             rules=RULES)
    assert "epilogue per image" in compiled.source and "prange" not in compiled.source
    x = torch.randn(3, cin, size, size)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
