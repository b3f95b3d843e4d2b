"""The grouped convolution drivers (`cuvil.targets.cpu.kernels.conv_grouped`) against
torch's conv2d: NCHW and NHWC, groups of several channels, every geometry, one thread and
two (units of image and group split between them, also for a single image)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cuvil.targets.cpu.kernels.conv_grouped import conv2d_nchw_grouped, conv2d_nhwc_grouped

cases = st.tuples(st.integers(1, 3), st.sampled_from([2, 3, 4, 10]), st.integers(1, 5),
                  st.integers(1, 4), st.integers(4, 12), st.integers(1, 3), st.integers(1, 2),
                  st.integers(0, 2), st.integers(1, 2), st.sampled_from([1, 2]))


def _reference(x, weight, groups, geo):
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    return torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(weight),
                                      stride=(sh, sw), padding=(ph, pw), dilation=(dh, dw),
                                      groups=groups).numpy()


@settings(max_examples=25, deadline=None)
@given(cases, st.sampled_from(["nchw", "nhwc"]))
def test_grouped_matches_torch(case, layout):
    n, groups, cg, ocg, size, k, stride, pad, dil, parts = case
    if (size + 2 * pad - dil * (k - 1) - 1) < 0:
        return  # no output pixel
    rng = np.random.default_rng(n * 31 + groups)
    x = rng.standard_normal((n, groups * cg, size, size + 1), np.float32)
    weight = rng.standard_normal((groups * ocg, cg, k, k), np.float32)
    geo = (k, k, stride, stride, pad, pad, dil, dil)
    ref = _reference(x, weight, groups, geo)
    oh, ow = ref.shape[2:]
    wg = weight.reshape(groups, ocg, cg, k, k)
    if layout == "nchw":
        out = np.full(ref.shape, np.nan, np.float32)
        cols = np.full((2, cg * k * k, oh * ow), np.nan, np.float32)
        conv2d_nchw_grouped(x, np.ascontiguousarray(wg.reshape(groups, ocg, -1)), out, cols,
                            geo, parts)
    else:
        out = np.full((n, oh, ow, groups * ocg), np.nan, np.float32)
        packed = np.ascontiguousarray(wg.transpose(0, 3, 4, 2, 1).reshape(groups, -1, ocg))
        cols = np.full((2, oh * ow, k * k * cg), np.nan, np.float32)
        tmp = np.full((2, oh * ow, ocg), np.nan, np.float32)
        conv2d_nhwc_grouped(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), packed, out, cols,
                            tmp, geo, parts)
        out = out.transpose(0, 3, 1, 2)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_one_image_in_parallel(layout):
    """Big enough for the parallel region: one image's groups split between two threads."""
    groups, cg, ocg, size = 8, 16, 16, 14
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, groups * cg, size, size), np.float32)
    weight = rng.standard_normal((groups * ocg, cg, 3, 3), np.float32)
    geo = (3, 3, 1, 1, 1, 1, 1, 1)
    ref = _reference(x, weight, groups, geo)
    wg = weight.reshape(groups, ocg, cg, 3, 3)
    if layout == "nchw":
        out = np.empty_like(ref)
        conv2d_nchw_grouped(x, np.ascontiguousarray(wg.reshape(groups, ocg, -1)), out,
                            np.empty((2, cg * 9, size * size), np.float32), geo, 2)
    else:
        out = np.empty((1, size, size, groups * ocg), np.float32)
        conv2d_nhwc_grouped(np.ascontiguousarray(x.transpose(0, 2, 3, 1)),
                            np.ascontiguousarray(wg.transpose(0, 3, 4, 2, 1).reshape(
                                groups, -1, ocg)), out,
                            np.empty((2, size * size, 9 * cg), np.float32),
                            np.empty((2, size * size, ocg), np.float32), geo, 2)
        out = out.transpose(0, 3, 1, 2)
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3)
