"""`cuvil.targets.cpu.kernels.f32_pixels`: the pixel tile (output channels in the vectors, pixels
broadcast) against its definition summed in numpy, for every tile shape the convolution
uses, every live pixel/channel count and every epilogue (bias, residual, clip; NaN kept),
nothing written outside the live ones; and the in-register transpose's plan against the
layout it promises."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from cuvil.targets.cpu.kernels.f32_pixels import pixel_tile_kernel, transpose_plan

SHAPES = [(16, 1, 1), (16, 1, 2), (8, 1, 1), (8, 1, 2), (8, 2, 1), (8, 2, 2)]
_P0, _P1, _P2, _P3, _P4, _P5 = (pixel_tile_kernel(*s) for s in SHAPES)


@njit
def _tile(which, x, q0, offs, w, w0, ldw, d, d0, plane, pixels, chans, epi):
    a = (x, q0, offs, offs.size, w, w0, ldw, d, d0, plane, pixels, chans, *epi)
    if which == 0:
        _P0(*a)
    elif which == 1:
        _P1(*a)
    elif which == 2:
        _P2(*a)
    elif which == 3:
        _P3(*a)
    elif which == 4:
        _P4(*a)
    else:
        _P5(*a)


def _reference(d, x, q0, offs, w, w0, ldw, d0, plane, pixels, chans, stride, epi):
    bias, res, lo, hi, flags = epi
    taps = x[q0 + offs[:, None] + stride * np.arange(pixels)]  # [kk, pixels]
    rows = w[w0 + np.arange(len(offs))[:, None] * ldw + np.arange(chans)]  # [kk, chans]
    for t in range(chans):
        at = slice(d0 + t * plane, d0 + t * plane + pixels)
        d[at] = (rows[:, t:t + 1] * taps).sum(0)
        if flags:
            d[at] += (bias[w0 + t] if flags & 1 else 0) + (res[at] if flags & 2 else 0)
            d[at] = np.where(d[at] < lo, lo, np.where(d[at] > hi, hi, d[at]))


EPILOGUES = st.tuples(st.integers(0, 3), st.sampled_from([(-np.inf, np.inf), (0, np.inf),
                                                         (0, 6), (-0.5, 0.5)]))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, len(SHAPES) - 1), st.integers(0, 30), EPILOGUES, st.data())
def test_pixel_tile_matches_its_definition(which, kk, epilogue, data):
    mr, nv, stride = SHAPES[which]
    pixels = data.draw(st.integers(1, mr))
    chans = data.draw(st.integers(1, 16 * nv))
    rng = np.random.default_rng(kk)
    x = rng.standard_normal(600).astype(np.float32)
    x[rng.integers(0, 600, 3)] = np.nan  # kept through the epilogue's clip
    offs = rng.integers(0, 500, kk)
    ldw, plane = 16 * nv + data.draw(st.integers(0, 7)), mr + data.draw(st.integers(0, 9))
    w = rng.standard_normal(kk * ldw + 40).astype(np.float32)
    d = np.full(32 * plane + 20, 1e30, np.float32)
    flags, (lo, hi) = epilogue
    bias = rng.standard_normal(60).astype(np.float32) if flags & 1 else np.empty(0, np.float32)
    res = rng.standard_normal(d.size).astype(np.float32) if flags & 2 else \
        np.empty(0, np.float32)
    flags += 4 if lo > -np.inf else 0  # a clip alone is an epilogue too
    epi = (bias, res, np.float32(lo), np.float32(hi), flags)
    expected = d.copy()
    _reference(expected, x, 7, offs, w, 3, ldw, 5, plane, pixels, chans, stride, epi)
    _tile(which, x, 7, offs, w, 3, ldw, d, 5, plane, pixels, chans, epi)
    np.testing.assert_allclose(d, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mr", [2, 4, 8, 16])
def test_transpose_plan_gathers_each_channels_pixels(mr):
    """Run the plan on labelled lanes: each final vector holds mr pixels of the channels
    the plan names, channel-major."""
    vecs = [[(m, c) for c in range(16)] for m in range(mr)]  # lane c of vector m
    rounds, channels = transpose_plan(mr)
    for rnd in rounds:
        old, vecs = vecs, list(vecs)
        for a, b, mask, out in rnd:
            both = old[a] + old[b]
            vecs[out] = [both[i] for i in mask]
    for vec, held in zip(vecs, channels, strict=True):
        assert len(held) == 16 // mr
        assert vec == [(m, c) for c in held for m in range(mr)]
    assert sorted(c for held in channels for c in held) == list(range(16))


def test_other_pixel_counts_are_refused():
    with pytest.raises(ValueError, match="2, 4, 8 or 16"):
        pixel_tile_kernel(12, 1, 1)
