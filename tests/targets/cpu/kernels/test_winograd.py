"""Winograd's F(2x2, 3x3) (`cuvil.targets.cpu.kernels.winograd`, the weight transformed by lowering)
against torch's conv2d: channel counts that are not whole tiles, rows of tiles shorter and
longer than a vector (and rows of 8, two to a vector), images of several bands, padding
0-2, every epilogue flag, one thread and two (images split, or one image's rows of tiles
split); and where lowering takes it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cuvil.targets.cpu.kernels.conv_post import conv2d_nchw_winograd_post
from cuvil.targets.cpu.kernels.winograd import conv2d_nchw_winograd, scratch_size
from cuvil.targets.cpu.templates.conv_drivers import _winograd_fits, winograd_weight


def _case(n, c, oc, oh, ow, pad, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, oh + 2 - 2 * pad, ow + 2 - 2 * pad), np.float32)
    w = rng.standard_normal((oc, c, 3, 3), np.float32)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=pad)
    scratch = np.full((2, scratch_size(c, oc, oh, ow)), np.nan, np.float32)
    return x, winograd_weight(w), ref.numpy(), scratch, (3, 3, 1, 1, pad, pad, 1, 1)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 3), c=st.integers(1, 20), oc=st.integers(1, 20),
       oh=st.integers(1, 21), ow=st.integers(1, 40), pad=st.integers(0, 2),
       parts=st.sampled_from([1, 2]))
def test_matches_torch(n, c, oc, oh, ow, pad, parts):
    oh, ow = 2 * oh, 2 * ow  # even output sizes, as lowering requires
    if oh + 2 - 2 * pad < 1 or ow + 2 - 2 * pad < 1:
        return
    x, u, ref, xs, geo = _case(n, c, oc, oh, ow, pad)
    out = np.full(ref.shape, np.nan, np.float32)
    conv2d_nchw_winograd(x, u, out, xs, geo, parts)
    np.testing.assert_allclose(out, ref, atol=1e-4 * c, rtol=1e-4)


@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("batch", [4, 1])
@pytest.mark.parametrize("epilogue", ["bias", "residual", "clip", "all"])
def test_the_epilogue_is_in_the_output_transform(epilogue, batch, parts):
    x, u, ref, xs, geo = _case(batch, 12, 20, 18, 36, 1, seed=1)
    rng = np.random.default_rng(2)
    bias = rng.standard_normal(20, np.float32) if epilogue in ("bias", "all") else \
        np.empty(0, np.float32)
    res = rng.standard_normal(ref.shape, np.float32) if epilogue in ("residual", "all") else \
        np.empty((0, 0, 0, 0), np.float32)
    clip = np.array([0, 6] if epilogue in ("clip", "all") else [-np.inf, np.inf], np.float32)
    expected = ref + (bias[None, :, None, None] if bias.size else 0) + (res if res.size else 0)
    expected = np.clip(expected, clip[0], clip[1])
    out = np.full(ref.shape, np.nan, np.float32)
    conv2d_nchw_winograd_post(x, u, xs, bias, res, clip, np.array(geo, np.int64), parts, out)
    np.testing.assert_allclose(out, expected, atol=2e-3, rtol=1e-4)


@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("oh", [16, 14, 34, 2])
def test_rows_of_eight_tiles_go_two_to_a_vector(oh, parts):
    """16 columns: two rows of tiles to a vector in both transforms (`_in_tile_pairs`, the
    output's `step`), with an odd last row of tiles (14, 2) and bands of 8 rows (34: 8, 8,
    1); the residual is read where each tile's outputs are stored."""
    x, u, ref, xs, geo = _case(3, 16, 24, oh, 16, 1, seed=3)
    rng = np.random.default_rng(4)
    bias, res = rng.standard_normal(24, np.float32), rng.standard_normal(ref.shape, np.float32)
    out = np.full(ref.shape, np.nan, np.float32)
    conv2d_nchw_winograd_post(x, u, xs, bias, res, np.array([-1, 1], np.float32),
                              np.array(geo, np.int64), parts, out)
    expected = np.clip(ref + bias[None, :, None, None] + res, -1, 1)
    np.testing.assert_allclose(out, expected, atol=2e-3, rtol=1e-4)


@pytest.mark.parametrize(("oh", "pad"), [(16, 1), (22, 0), (6, 2)])
def test_images_alone_split_their_rows_of_tiles(oh, pad):
    """Fewer images than threads (3 on 4): each image's rows of tiles split, each thread
    padding only the rows it reads into its scratch row, which starts full of NaN and is
    cleared for the first image only; shares of 2 rows, and threads left with none."""
    x, u, ref, _, geo = _case(3, 16, 8, oh, 16, pad, seed=5)
    xs = np.full((4, scratch_size(16, 8, oh, 16)), np.nan, np.float32)
    out = np.full(ref.shape, np.nan, np.float32)
    conv2d_nchw_winograd(x, u, out, xs, geo, 4)
    np.testing.assert_allclose(out, ref, atol=2e-3, rtol=1e-4)


def test_a_small_scratch_is_refused():
    x, u, ref, xs, geo = _case(1, 4, 4, 8, 8, 1)
    with pytest.raises(ValueError, match="scratch"):
        conv2d_nchw_winograd(x, u, np.empty_like(ref), xs[:, :100], geo, 1)


@pytest.mark.parametrize(("geo", "cin", "oc", "oh", "ow", "takes"), [
    ((3, 3, 1, 1, 1, 1, 1, 1), 32, 32, 16, 16, True),
    ((3, 3, 1, 1, 1, 1, 1, 1), 16, 32, 16, 16, True),  # the CNN's channels
    ((3, 3, 1, 1, 1, 1, 1, 1), 8, 8, 32, 32, True),
    ((3, 3, 1, 1, 1, 1, 1, 1), 6, 16, 16, 16, False),  # too few channels: the direct tile
    ((3, 3, 1, 1, 1, 1, 1, 1), 3, 16, 32, 32, False),  # an RGB stem
    ((3, 3, 1, 1, 1, 1, 1, 1), 16, 16, 8, 8, False),  # rows of 4 tiles
    ((3, 3, 1, 1, 1, 1, 1, 1), 64, 64, 8, 8, False),  # rows of 4 tiles
    ((3, 3, 1, 1, 1, 1, 1, 1), 64, 64, 17, 17, False),  # odd sizes
    ((3, 3, 2, 2, 1, 1, 1, 1), 64, 64, 16, 16, False),  # stride 2
    ((3, 3, 1, 1, 2, 2, 2, 2), 64, 64, 16, 16, False),  # dilated
    ((5, 5, 1, 1, 2, 2, 1, 1), 64, 64, 16, 16, False),  # 5x5
])
def test_lowering_takes_it_where_it_is_faster(geo, cin, oc, oh, ow, takes):
    assert _winograd_fits(geo, cin, oc, oh, ow) is takes
