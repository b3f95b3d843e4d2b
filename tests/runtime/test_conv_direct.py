"""The direct f32 NCHW convolution (`cuvil.runtime.conv_direct` on the register tile of
`f32_tile`) against torch's conv2d: every geometry (kernel, stride per axis, padding,
dilation), channel counts that are not whole tiles, rows shorter and longer than a tile,
one thread and two (images split, or one image's tiles split); and through the compiler,
with a fused epilogue, against the reference executor."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cuvil.lower.templates.conv import arranged_size
from cuvil.runtime.conv_direct import arranged_floats, conv2d_nchw_direct, conv2d_nchw_direct_image


def _scratch(geo, ch, h, w, oc, threads=2):
    size = arranged_floats(geo, ch, h, w, oc)
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
    conv2d_nchw_direct(x, wk, out, _scratch(geo, c, h, w, oc), geo, parts)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("h, w", [(33, 35), (16, 16), (15, 16)])  # rows of 16: two a tile
def test_large_enough_to_split_between_threads(h, w):
    for n in (1, 2, 5):  # one image split into tiles; images split between threads
        x, wk, ref, geo = _case(n, 16, 20, h, w, (3, 3), (1, 1), (1, 1), (1, 1), seed=n)
        out = np.full(ref.shape, np.nan, np.float32)
        conv2d_nchw_direct(x, wk, out, _scratch(geo, 16, h, w, 20), geo, 2)
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


@pytest.mark.parametrize("c, oc", [(16, 64), (64, 16)])
def test_aliased_planes_are_read_a_cache_line_apart(c, oc):
    """32x32 planes (4 KiB) are copied a cache line apart when more than two tiles of
    output channels re-read them, else read in place; either way the result is exact."""
    x, wk, ref, geo = _case(2, c, oc, 32, 32, (1, 1), (1, 1), (0, 0), (1, 1))
    size = arranged_floats(geo, c, 32, 32, oc)
    assert size == (c * (1024 + 16) if oc > 16 else 1)
    out = np.full(ref.shape, np.nan, np.float32)
    conv2d_nchw_direct(x, wk, out, np.full((2, size), np.nan, np.float32), geo, 1)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@settings(max_examples=200, deadline=None)
@given(geometries, st.sampled_from([(32, 32), (16, 32), (30, 30)]), st.sampled_from([1, 40]))
def test_lowering_plans_the_scratch_the_driver_needs(case, size, wide):
    n, c, oc, h, w, k, stride, pad, dil, parts = case
    h, w = size if n == 1 else (h, w)
    geo, c = (*k, *stride, *pad, *dil), c * wide
    assert arranged_size(geo, c, h, w, oc * 4) == arranged_floats(geo, c, h, w, oc * 4)
