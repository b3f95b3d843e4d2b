"""NCHW convolutions with the common epilogue (bias, residual, ReLU/ReLU6/hardtanh) are the
runtime's drivers themselves (`runtime.conv_post`): nothing generated, and the results of
torch eager for each driver, epilogue, thread count and batch (images split between
threads, one image split, one thread)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import cuvil

HARDTANH_RULES = """
ruleset fusion_conv_hardtanh
op conv2d_bias_hardtanh(x, w, b, stride, padding, dilation, groups) =
    hardtanh(conv2d_bias(x, w, b, stride, padding, dilation, groups), min_val=-0.5, max_val=0.5)
    kernel conv
rule conv_bias_hardtanh: hardtanh(conv2d_bias(x, w, b, s, p, d, g), min_val=-0.5, max_val=0.5)
    => conv2d_bias_hardtanh(x, w, b, s, p, d, g)
"""

DRIVERS = {  # driver -> (cin, cout, kernel, stride, size): shapes that take it
    "conv2d_nchw_direct_post": (16, 16, 3, 1, 17),  # pixel tile (odd rows: not Winograd)
    "conv2d_nchw_direct_post, rows of 8": (16, 32, 3, 2, 16),  # pixel tile, 8 x 32
    "conv2d_nchw_direct_post, few steps": (6, 16, 3, 1, 16),  # plain tile, epilogue after
    # the plain tile on runs of pixels (a last block of 4 rows), the epilogue after
    "conv2d_nchw_direct_post, rows of 32": (6, 12, 3, 1, 32),
    "conv2d_nchw_direct_post, 1x1": (20, 20, 1, 1, 32),
    "conv2d_nchw_post": (16, 32, 3, 2, 24),  # rows of 12: im2col
    "conv2d_nchw_few_post": (3, 8, 3, 1, 12),  # 3 channels, rows of 12
    "conv1x1_nchw_post": (16, 24, 1, 1, 3),  # 9 pixels
    "conv2d_nchw_winograd_post": (32, 32, 3, 1, 16),  # 3x3, 32 channels: Winograd
    "conv2d_nchw_winograd_post, 16 channels": (16, 16, 3, 1, 16),  # the CNN's layers
}
EPILOGUES = {
    "none": lambda y, x: y,
    "relu6": lambda y, x: torch.nn.functional.relu6(y),
    "residual relu": lambda y, x: torch.relu(y + x) if y.shape == x.shape else torch.relu(y),
    "hardtanh": lambda y, x: torch.nn.functional.hardtanh(y, -0.5, 0.5),
}


class ConvThen(nn.Module):
    def __init__(self, cin, cout, kernel, stride, epilogue: str):
        super().__init__()
        pad = 0 if kernel == 1 else kernel // 2
        self.conv = nn.Conv2d(cin, cout, kernel, stride, pad, bias=epilogue != "none")
        self.epilogue = EPILOGUES[epilogue]

    def forward(self, x):
        return self.epilogue(self.conv(x), x)


@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("driver", DRIVERS)
def test_the_driver_is_the_kernel_and_matches_torch(driver, epilogue):
    cin, cout, kernel, stride, size = DRIVERS[driver]
    torch.manual_seed(0)
    model = ConvThen(cin, cout, kernel, stride, epilogue).eval()
    for threads in (2, 1):
        compiled = cuvil.compile(model, (torch.randn(2, cin, size, size),), threads=threads,
                                 rules=[None, HARDTANH_RULES])
        assert [k.template for k in compiled.report.kernels] == ["conv"]
        assert f"k0_conv = {driver.split(',')[0]}  #" in compiled.source
        assert "@njit" not in compiled.source  # nothing generated to compile
        for batch in (8, 1):
            x = torch.randn(batch, cin, size, size)
            with torch.no_grad():
                torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)


def test_a_broadcast_residual_is_generated():
    """A residual that broadcasts (one image for the batch) is not the drivers' epilogue."""

    class Broadcast(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 8, 3, 1, 1)
            self.pos = nn.Parameter(torch.randn(1, 8, 16, 16))

        def forward(self, x):
            return self.conv(x) + self.pos

    torch.manual_seed(0)
    model = Broadcast().eval()
    x = torch.randn(4, 8, 16, 16)
    compiled = cuvil.compile(model, (x,), threads=2)
    assert "_post  #" not in compiled.source
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("parts", [1, 2])
def test_a_clip_alone_is_applied_by_the_direct_driver(parts):
    """No bias, no residual, only ReLU's clip (lowering fuses none such today, but the
    driver takes it): the pixel tile must still clip."""
    import numpy as np

    from cuvil.targets.cpu.kernels.conv_post import conv2d_nchw_direct_post

    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 16, 16, 16), dtype=np.float32)
    w = rng.standard_normal((16, 16, 3, 3), dtype=np.float32)
    wk = np.ascontiguousarray(w.reshape(16, -1).T)
    out = np.full((4, 16, 16, 16), np.nan, np.float32)
    conv2d_nchw_direct_post(x, wk, np.zeros((2, 16 * 18 * 18), np.float32),
                            np.empty(0, np.float32), np.empty((0, 0, 0, 0), np.float32),
                            np.array([0, np.inf], np.float32),
                            np.array([3, 3, 1, 1, 1, 1, 1, 1], np.int64), parts, out)
    ref = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w),
                                                padding=1))
    torch.testing.assert_close(torch.from_numpy(out), ref, atol=1e-4, rtol=1e-4)


SCRATCH_CASES = {  # name -> (cin, cout, stride, size, pool)
    "pixel tile": (16, 16, 1, 16, False),
    "pixel tile, stride 2": (16, 32, 2, 16, False),
    "plain tile, stride phases": (6, 16, 2, 32, False),
    "pooled, plain tile": (3, 16, 1, 32, True),
}


@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("case", SCRATCH_CASES)
def test_scratch_holding_garbage_is_cleared_once_a_call(case, parts):
    """A thread clears its scratch for its first image of a call and only rearranges it
    for the next ones (`conv_direct.direct_image_planned`): scratch full of NaN from an
    earlier kernel must not reach the result, for any image of either thread."""
    import numpy as np

    from cuvil.targets.cpu.kernels.conv_direct import conv2d_nchw_direct
    from cuvil.targets.cpu.kernels.conv_post import (
        conv2d_nchw_direct_pool_post,
        conv2d_nchw_direct_post,
    )

    cin, cout, stride, size, pool = SCRATCH_CASES[case]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, cin, size, size), dtype=np.float32)
    w = rng.standard_normal((cout, cin, 3, 3), dtype=np.float32)
    wk = np.ascontiguousarray(w.reshape(cout, -1).T)
    xs = np.full((2, cin * (size + 2) ** 2 + 64), np.nan, np.float32)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=stride,
                                     padding=1)
    args = (np.empty(0, np.float32), np.empty((0, 0, 0, 0), np.float32),
            np.array([-np.inf, np.inf], np.float32),
            np.array([3, 3, stride, stride, 1, 1, 1, 1], np.int64))
    if pool:
        ref = torch.nn.functional.max_pool2d(ref, 2)
        ys = np.full((2, cout + 1, size, size), np.nan, np.float32)
        out = np.full(ref.shape, np.nan, np.float32)
        conv2d_nchw_direct_pool_post(x, wk, xs, ys, *args, np.array([2, 2, 2, 2, 0, 0]),
                                     parts, out)
    else:
        out = np.full(ref.shape, np.nan, np.float32)
        conv2d_nchw_direct_post(x, wk, xs, *args, parts, out)
        plain = np.full(ref.shape, np.nan, np.float32)  # the batch driver generated kernels call
        conv2d_nchw_direct(x, wk, plain, np.full_like(xs, np.nan), tuple(args[3]), parts)
        torch.testing.assert_close(torch.from_numpy(plain), ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(torch.from_numpy(out), ref, atol=1e-4, rtol=1e-4)
