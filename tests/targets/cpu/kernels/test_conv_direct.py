"""The direct f32 NCHW convolution (`cuvil.targets.cpu.kernels.conv_direct` on the register tiles of
`f32_tile`, `f32_lines` and `f32_pixels`) against torch's conv2d: every geometry (kernel,
stride per axis, padding, dilation), channel counts that are not whole tiles, rows shorter
and longer than a tile, one thread and two (images split, or one image's tiles split)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cuvil.targets.cpu.kernels.conv_direct import (
    PIXEL_MIN_STEPS,
    _pixel_tiles,
    conv2d_nchw_direct,
    conv2d_nchw_direct_image,
)


def _scratch(geo, ch, h, w, threads=2):
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    size = ch * sh * sw * -(-(h + 2 * ph) // sh) * -(-(w + 2 * pw) // sw)
    return np.full((threads, size), np.nan, np.float32)  # arranged planes are all written


def _case(n, c, oc, h, w, k, stride, pad, dil, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w), np.float32)
    weight = rng.standard_normal((oc, c, k[0], k[1]), np.float32)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(weight),
                                     stride=stride, padding=pad, dilation=dil).numpy()
    geo = (*k, *stride, *pad, *dil)
    wk = np.ascontiguousarray(weight.reshape(oc, -1).T)
    return x, wk, ref, geo


geometries = st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(1, 20),
                       st.integers(1, 12), st.integers(1, 40),
                       st.tuples(st.integers(1, 3), st.integers(1, 4)),
                       st.tuples(st.integers(1, 3), st.integers(1, 3)),
                       st.tuples(st.integers(0, 2), st.integers(0, 2)),
                       st.tuples(st.integers(1, 2), st.integers(1, 2)), st.integers(1, 2))


@settings(max_examples=60, deadline=None)
@given(geometries)
def test_matches_torch_on_every_geometry(case):
    n, c, oc, h, w, k, stride, pad, dil, parts = case
    assume(all(s + 2 * p - d * (kk - 1) >= 1 for s, p, d, kk in
               zip((h, w), pad, dil, k, strict=True)))  # at least one output pixel
    x, wk, ref, geo = _case(n, c, oc, h, w, k, stride, pad, dil)
    out = np.full(ref.shape, np.nan, np.float32)
    conv2d_nchw_direct(x, wk, out, _scratch(geo, c, h, w), geo, parts)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("h, w", [(33, 35), (16, 16), (15, 16)])  # rows of 16: two a tile
def test_large_enough_to_split_between_threads(h, w):
    for n in (1, 2, 5):  # one image split into tiles; images split between threads
        x, wk, ref, geo = _case(n, 16, 20, h, w, (3, 3), (1, 1), (1, 1), (1, 1), seed=n)
        out = np.full(ref.shape, np.nan, np.float32)
        conv2d_nchw_direct(x, wk, out, _scratch(geo, 16, h, w), geo, 2)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("w", [3, 4, 5, 7, 8])  # rows of 5-8 two to a vector; 1-4 masked
def test_short_rows_go_several_to_a_vector(stride, w):
    for n, parts in ((1, 1), (3, 2), (1, 2)):
        x, wk, ref, geo = _case(n, 5, 11, 2 * w + 1, 2 * w if stride == 2 else w, (3, 3),
                                (stride, stride), (1, 1), (1, 1), seed=w)
        out = np.full(ref.shape, np.nan, np.float32)
        conv2d_nchw_direct(x, wk, out, _scratch(geo, 5, *x.shape[2:]), geo, parts)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_scratch_too_small_for_the_arranged_image_is_refused():
    x, wk, ref, geo = _case(1, 4, 8, 10, 10, (3, 3), (1, 1), (1, 1), (1, 1))
    out = np.empty(ref.shape, np.float32)
    with pytest.raises(ValueError, match="scratch for the arranged image is too small"):
        conv2d_nchw_direct(x, wk, out, np.zeros((2, 4 * 12 * 12 - 1), np.float32), geo, 1)


def test_one_image_reads_an_unpadded_input_in_place():
    x, wk, ref, geo = _case(1, 64, 16, 32, 32, (1, 1), (1, 1), (0, 0), (1, 1))
    out = np.full(ref.shape[1:], np.nan, np.float32)
    xs = np.full(1, np.nan, np.float32)  # never read: the image is its own arranged form
    conv2d_nchw_direct_image(x[0], wk, out, xs, geo)
    np.testing.assert_allclose(out, ref[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c, oc, h, w, stride, pad, dil", [
    (16, 32, 16, 16, (2, 2), (1, 1), (1, 1)),  # the CNN's widening layer: 8 x 32 tiles
    (16, 16, 16, 16, (1, 1), (1, 1), (1, 1)),  # rows of 16: 16 x 16 tiles
    (8, 40, 13, 37, (1, 2), (2, 1), (1, 2)),  # row tails, channel tails, dilation
    (9, 17, 9, 9, (2, 1), (0, 1), (2, 1)),  # rows of 9: a 16 tile with 9 live pixels
    (12, 5, 11, 6, (1, 1), (1, 0), (1, 1)),  # rows of 4, fewer channels than a vector
    (16, 24, 11, 11, (2, 2), (0, 0), (1, 1)),  # unpadded stride 2: the image read in place
])
def test_layers_with_enough_steps_run_on_the_pixel_tile(c, oc, h, w, stride, pad, dil):
    for n, parts in ((1, 1), (3, 2), (1, 2)):
        x, wk, ref, geo = _case(n, c, oc, h, w, (3, 3), stride, pad, dil, seed=c)
        assert _pixel_tiles.py_func(geo, c * 9) and c * 9 >= PIXEL_MIN_STEPS
        out = np.full(ref.shape, np.nan, np.float32)
        conv2d_nchw_direct(x, wk, out, _scratch(geo, c, h, w), geo, parts)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_few_steps_and_no_sideways_taps_stay_on_the_plain_tile():
    assert not _pixel_tiles.py_func((3, 3, 1, 1, 1, 1, 1, 1), 27)  # the CNN's stem
    assert not _pixel_tiles.py_func((1, 1, 1, 1, 0, 0, 1, 1), 256)  # 1x1: loads line up
    assert not _pixel_tiles.py_func((3, 3, 3, 3, 1, 1, 1, 1), 256)  # pixels 3 apart
