"""A convolution with a max pool in its epilogue (`conv2d_bias_relu_max_pool`, rule
`conv_bias_relu_max_pool`) is `conv_post.conv2d_nchw_direct_pool_post` (or
`_winograd_pool_post`): each image pooled from a thread's scratch. Against torch eager, for
the plain and the pixel tile and Winograd, 2x2 and 3x3 windows, a padded pool (ResNet's
stem), threads taking images, one image split between threads, one thread; a residual
before the pool (a fused op of the test's own); and a convolution the driver cannot take,
whose pool is split off into its own kernel."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import cuvil

# A fused op the stock rules do not define: lowering takes any common epilogue before the pool.
RESIDUAL_POOL_RULES = """
ruleset fusion_conv_residual_pool
op conv2d_bias_add_relu_max_pool(x, w, b, r, stride, padding, dilation, groups, k, ps) =
    max_pool2d(conv2d_bias_add_relu(x, w, b, r, stride, padding, dilation, groups),
               kernel_size=k, stride=ps) kernel conv
rule conv_residual_pool: max_pool2d(conv2d_bias_add_relu(x, w, b, r, s, p, d, g),
                                    kernel_size=k, stride=ps, padding=(0, 0),
                                    dilation=(1, 1), ceil_mode=False)
    => conv2d_bias_add_relu_max_pool(x, w, b, r, s, p, d, g, k, ps)
"""


class ConvPool(nn.Module):
    def __init__(self, cin, cout, pool, residual=False, conv=(3, 1, 1)):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(cin, cout, *conv, bias=False), nn.BatchNorm2d(cout)
        self.pool, self.residual = nn.MaxPool2d(*pool), residual
        self.bn.running_mean.uniform_(-0.5, 0.5)
        self.bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        y = self.bn(self.conv(x))
        return self.pool(torch.relu(y + x if self.residual else y))


CASES = {  # name -> (cin, cout, image size, pool (kernel, stride, padding), conv)
    "plain tile, 2x2": (3, 16, 32, (2, 2, 0), (3, 1, 1)),
    "pixel tile, 2x2 on an odd size": (16, 16, 17, (2, 2, 0), (3, 1, 1)),
    "pixel tile, 3x3 stride 2, odd size": (16, 32, 17, (3, 2, 0), (3, 1, 1)),
    "ResNet's stem: 7x7 stride 2, pool 3x3 stride 2 padded": (3, 16, 38, (3, 2, 1), (7, 2, 3)),
    "Winograd (32 channels), 2x2": (32, 32, 16, (2, 2, 0), (3, 1, 1)),
    "Winograd (16 channels, the CNN's), 2x2": (16, 16, 16, (2, 2, 0), (3, 1, 1)),
}


def _check(model, cin, size, threads, rules=None, driver="conv2d_nchw_direct_pool_post"):
    compiled = cuvil.compile(model, (torch.randn(4, cin, size, size),), threads=threads,
                             rules=rules)
    assert f"k0_conv = {driver}  #" in compiled.source
    for batch in (4, 1):
        x = torch.randn(batch, cin, size, size)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    return compiled


@pytest.mark.parametrize("threads", [2, 1])
@pytest.mark.parametrize("case", CASES)
def test_the_pooled_convolution_is_one_driver_call(case, threads):
    cin, cout, size, pool, conv = CASES[case]
    torch.manual_seed(0)
    driver = f"conv2d_nchw_{'winograd' if 'Winograd' in case else 'direct'}_pool_post"
    compiled = _check(ConvPool(cin, cout, pool, conv=conv).eval(), cin, size, threads,
                      driver=driver)
    assert [k.template for k in compiled.report.kernels] == ["conv"]
    assert "conv_bias_relu_max_pool (rules/fusion/conv.cvr:" in compiled.source
    assert "@njit" not in compiled.source


@pytest.mark.parametrize(("channels", "size", "kind"), [
    (16, 17, "direct"), (16, 16, "winograd"), (32, 16, "winograd")])
def test_a_residual_before_the_pool(channels, size, kind):
    torch.manual_seed(0)
    model = ConvPool(channels, channels, (2, 2), residual=True).eval()
    compiled = _check(model, channels, size, 2, rules=[None, RESIDUAL_POOL_RULES],
                      driver=f"conv2d_nchw_{kind}_pool_post")
    assert "conv2d_bias_add_relu_max_pool" in compiled.source


def test_a_convolution_the_driver_cannot_take_keeps_its_epilogue_and_pools_apart():
    """Rows of 12 pixels go through im2col, which has no pooled form: the convolution
    keeps its bias and ReLU, the pool is its own kernel."""
    torch.manual_seed(0)
    compiled = _check(ConvPool(16, 16, (2, 2)).eval(), 16, 12, 2, driver="conv2d_nchw_post")
    assert [k.template for k in compiled.report.kernels] == ["conv", "pool"]
    assert "epilogue bias + clip [0, inf]" in compiled.source
