"""`runtime.depthwise.depthwise_nchw_post` against torch's depthwise convolution + bias +
clamp: every window it is compiled for, paddings from none to "same", planes narrower and
wider than a strip, one thread and two; and the lowering of a depthwise group to it (and
not of the groups it does not compute)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import cuvil
from cuvil.targets.cpu.kernels.depthwise import depthwise_nchw_post

SHAPES = [(2, 6, 9, 7), (1, 4, 12, 40), (3, 5, 33, 16), (1, 2, 3, 70)]  # N, C, H, W
CLIPS = {"relu6": (0.0, 6.0), "none": (-np.inf, np.inf)}


def reference(x, w, bias, k, pad, clip):
    y = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w).reshape(-1, 1, k, k),
                                   None if bias is None else torch.from_numpy(bias), padding=pad,
                                   groups=x.shape[1])
    return torch.clamp(y, *clip).numpy()


def run(x, w, bias, k, pad, clip, threads):
    n, c, h, width = x.shape
    out = np.full((n, c, h + 2 * pad - k + 1, width + 2 * pad - k + 1), np.nan, np.float32)
    depthwise_nchw_post(x, w, np.zeros(0, np.float32) if bias is None else bias,
                        np.array(clip, np.float32), np.array([k, k, 1, 1, pad, pad, 1, 1]),
                        threads, out)
    return out


@pytest.mark.parametrize("k", [3, 5, 7])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_driver_matches_torch(k, shape):
    rng = np.random.default_rng(k)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((shape[1], k * k)).astype(np.float32)
    bias = rng.standard_normal(shape[1]).astype(np.float32)
    for pad in sorted({0, 1, k // 2}):
        if shape[2] + 2 * pad < k or shape[3] + 2 * pad < k:
            continue
        for (name, clip), threads in zip(CLIPS.items(), (2, 1), strict=True):
            for b in (bias, None):
                np.testing.assert_allclose(run(x, w, b, k, pad, clip, threads),
                                           reference(x, w, b, k, pad, clip), atol=2e-5,
                                           rtol=1e-5, err_msg=f"pad {pad}, {name}")


def test_split_between_threads_matches_one_thread():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 24, 20, 20)).astype(np.float32)
    w = rng.standard_normal((24, 9)).astype(np.float32)
    bias = rng.standard_normal(24).astype(np.float32)
    one, two = (run(x, w, bias, 3, 1, CLIPS["relu6"], t) for t in (1, 2))
    np.testing.assert_array_equal(one, two)
    np.testing.assert_allclose(two, reference(x, w, bias, 3, 1, CLIPS["relu6"]), atol=2e-5)


def test_nan_stays_nan_through_the_clip():
    x = np.ones((1, 1, 4, 4), np.float32)
    x[0, 0, 1, 1] = np.nan
    out = run(x, np.ones((1, 9), np.float32), None, 3, 1, CLIPS["relu6"], 1)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(reference(x, np.ones((1, 9),
                                                                              np.float32),
                                                                    None, 3, 1, (0, 6))))


@pytest.mark.parametrize("geo", [[3, 3, 2, 2, 1, 1, 1, 1], [3, 3, 1, 1, 2, 2, 2, 2],
                                 [3, 5, 1, 1, 1, 2, 1, 1], [9, 9, 1, 1, 4, 4, 1, 1]],
                         ids=["stride", "dilation", "3x5", "9x9"])
def test_other_geometry_is_refused(geo):
    x = np.zeros((1, 2, 8, 8), np.float32)
    with pytest.raises(ValueError, match="depthwise_nchw_post"):
        depthwise_nchw_post(x, np.zeros((2, geo[0] * geo[1]), np.float32),
                            np.zeros(0, np.float32), np.array([0, 6], np.float32),
                            np.array(geo, np.int64), 1, np.zeros((1, 2, 8, 8), np.float32))


class Block(nn.Module):
    """depthwise k x k + batch norm + ReLU6, with an optional residual add."""

    def __init__(self, k: int, residual: bool):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, k, padding=k // 2, groups=8, bias=False)
        self.bn, self.residual = nn.BatchNorm2d(8), residual
        self.bn.running_mean.uniform_(-0.5, 0.5)

    def forward(self, x):
        y = self.bn(self.conv(x))
        return y + x if self.residual else torch.nn.functional.relu6(y)


@pytest.mark.parametrize("k", [3, 5, 7])
def test_a_depthwise_group_is_the_driver(k):
    torch.manual_seed(k)
    model = Block(k, residual=False).eval()
    compiled = cuvil.compile(model, (torch.randn(2, 8, 10, 19),))
    assert "k0_conv = depthwise_nchw_post  #" in compiled.source
    assert "@njit" not in compiled.source
    x = torch.randn(3, 8, 10, 19) * 3
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=2e-5, rtol=1e-5)


def test_a_residual_epilogue_is_generated():
    torch.manual_seed(0)
    model = Block(3, residual=True).eval()
    compiled = cuvil.compile(model, (torch.randn(2, 8, 10, 19),))
    assert "depthwise_nchw_post" not in compiled.source
    x = torch.randn(3, 8, 10, 19)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=2e-5, rtol=1e-5)
