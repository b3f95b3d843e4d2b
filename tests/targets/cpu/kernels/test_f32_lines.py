"""`kernels.f32_lines`: the line tile (short rows packed 2 or 4 to a vector) against
its definition summed in numpy, every live row/line/pixel count, nothing written outside
the live lines; and the stride-2 copy and the even/odd split against numpy slicing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from cuvil.targets.cpu.kernels.f32_lines import copy_every_other, line_tile_kernel, split_columns

_L2, _L4 = line_tile_kernel(2, 2), line_tile_kernel(2, 4)


@njit
def _tile(g, x, q0, offs, w, w0, wk, d, d0, ldd, rows, width, lines, xv, dv):
    if g == 2:
        _L2(x, q0, offs, offs.size, w, w0, wk, 1, d, d0, ldd, rows, width, lines, xv, dv)
    else:
        _L4(x, q0, offs, offs.size, w, w0, wk, 1, d, d0, ldd, rows, width, lines, xv, dv)


def _reference(d, x, q0, offs, w, w0, wk, d0, ldd, rows, width, lines, xv, dv):
    for m in range(rows):
        for r in range(lines):
            at = d0 + m * ldd + r * dv
            taps = x[q0 + offs[:, None] + r * xv + np.arange(width)]  # [kk, width]
            d[at:at + width] = (w[w0 + np.arange(len(offs)) * wk + m][:, None] * taps).sum(0)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([2, 4]), st.integers(1, 8), st.integers(1, 8), st.integers(0, 20),
       st.data())
def test_line_tile_matches_its_definition(g, rows, lines, kk, data):
    lines = min(lines, 2 * g)
    width = data.draw(st.integers(1, 16 // g))
    rng = np.random.default_rng(kk)
    x = rng.standard_normal(400).astype(np.float32)
    offs = rng.integers(0, 200, kk)
    w = rng.standard_normal(300).astype(np.float32)
    xv, dv, ldd = width + data.draw(st.integers(0, 5)), width + 2, 40
    d = np.full(400, np.nan, np.float32)
    expected = d.copy()
    _reference(expected, x, 3, offs, w, 2, 9, 5, ldd, rows, width, lines, xv, dv)
    _tile(g, x, 3, offs, w, 2, 9, d, 5, ldd, rows, width, lines, xv, dv)
    np.testing.assert_allclose(d, expected, rtol=1e-5, atol=1e-5)


def test_other_line_counts_are_refused():
    with pytest.raises(ValueError, match="2 or 4"):
        line_tile_kernel(2, 3)


@njit
def _every_other(dst, d0, src, s0, n):
    copy_every_other(dst, d0, src, s0, n)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 70), st.integers(0, 20), st.integers(0, 20))
def test_copy_every_other_writes_exactly_the_run(n, d0, s0):
    src = np.arange(s0 + 2 * n, dtype=np.float32)  # ends at the last element read
    dst = np.full(d0 + n + 40, -1, np.float32)
    expected = dst.copy()
    expected[d0:d0 + n] = src[s0:s0 + 2 * n:2]
    _every_other(dst, d0, src, s0, n)
    np.testing.assert_array_equal(dst, expected)


@njit
def _split(dst, d_even, d_odd, src, s0, n):
    split_columns(dst, d_even, d_odd, src, s0, n)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 100), st.integers(0, 20), st.integers(0, 20))
def test_split_columns_writes_exactly_both_halves(n, d0, s0):
    """Evens then odds, each run exactly as long as its parity's count (an odd n has one
    even more), reading nothing past src[s0 + n - 1]."""
    src = np.arange(s0 + n, dtype=np.float32)
    dst = np.full(d0 + n + 80, -1, np.float32)
    d_odd = d0 + (n + 1) // 2 + 7  # a gap between the runs stays untouched
    expected = dst.copy()
    expected[d0:d0 + (n + 1) // 2] = src[s0::2]
    expected[d_odd:d_odd + n // 2] = src[s0 + 1::2]
    _split(dst, d0, d_odd, src, s0, n)
    np.testing.assert_array_equal(dst, expected)
