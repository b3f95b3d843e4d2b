"""`cuvil.targets.cpu.kernels.f32_tile.copy_floats`: runs of any length and offset copied exactly,
nothing written outside them (the masked tail), against numpy slicing."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from cuvil.targets.cpu.kernels.f32_tile import copy_floats


@njit
def _copy(dst, d0, src, s0, n):
    copy_floats(dst, d0, src, s0, n)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 70), st.integers(0, 20), st.integers(0, 20))
def test_copy_floats_writes_exactly_the_run(n, d0, s0):
    src = np.arange(s0 + n + 40, dtype=np.float32)
    dst = np.full(d0 + n + 40, -1, np.float32)
    expected = dst.copy()
    expected[d0:d0 + n] = src[s0:s0 + n]
    _copy(dst, d0, src, s0, n)
    np.testing.assert_array_equal(dst, expected)
