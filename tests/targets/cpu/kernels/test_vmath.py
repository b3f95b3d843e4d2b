"""`runtime.vmath`: exp, tanh, sigmoid and erf against the C library over a dense grid,
the extremes (0, 1, -1 or inf where f32 saturates) and NaN, for f32 arguments (erf in f32
arithmetic) and f64 ones; `vmax` against numpy's max."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit

from cuvil.targets.cpu.kernels.vmath import verf, vexp, vmax, vsigmoid, vtanh

FAST = {"nsz", "arcp", "contract", "afn", "reassoc"}  # what generated kernels use
CASES = {  # name -> (function, reference, grid, absolute tolerance)
    "exp": (vexp, math.exp, (-20.0, 20.0), 0.0),
    "tanh": (vtanh, math.tanh, (-12.0, 12.0), 4e-7),
    "sigmoid": (vsigmoid, lambda v: 1 / (1 + math.exp(-v)), (-30.0, 30.0), 4e-7),
    "erf": (verf, math.erf, (-7.0, 7.0), 5e-7),
}


def elementwise(fn):
    @njit(fastmath=FAST, error_model="numpy")
    def apply(x, out):
        for i in range(x.shape[0]):
            out[i] = fn(x[i])

    return apply


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", CASES)
def test_matches_the_c_library(name, dtype):
    fn, ref, (lo, hi), atol = CASES[name]
    x = np.linspace(lo, hi, 200_001).astype(dtype)
    out = np.empty_like(x)
    elementwise(fn)(x, out)
    expected = np.array([ref(float(v)) for v in x])
    np.testing.assert_allclose(out, expected, atol=atol, rtol=2e-7 if atol else 1e-6)


@pytest.mark.parametrize("name", CASES)
def test_extremes_and_nan(name):
    fn, ref, _, _ = CASES[name]
    x = np.array([np.nan, -np.inf, np.inf, 0.0, -200.0, 200.0], np.float32)
    out = np.empty_like(x)
    elementwise(fn)(x, out)
    assert np.isnan(out[0])
    with np.errstate(over="ignore"):
        expected = [ref(float(v)) if abs(v) < 100 or name != "exp" else
                    (math.inf if v > 0 else 0.0) for v in x[1:]]
    np.testing.assert_allclose(out[1:], np.array(expected, np.float32), atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_vmax_is_numpys_max(dtype):
    rng = np.random.default_rng(0)
    for n in [*range(1, 20), 127, 128, 1000]:
        row = (rng.standard_normal(n) * 100).astype(dtype)
        assert vmax(row) == row.max()
        row[n // 2] = 10 ** 6  # anywhere, also in the tail the eight maxima do not cover
        assert vmax(row) == 10 ** 6
    row = np.array([-np.inf, -np.inf, np.inf, 1.0] * 5, np.float32)
    assert vmax(row) == np.inf and vmax(row[:2]) == -np.inf
