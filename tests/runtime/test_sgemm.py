"""`cuvil.runtime.blas.gemm` and `gemm_batched` against numpy in float64: Cuvil's f32
register tile (`sgemm`, called directly: row and column tails, K = 0, empty products, rows
or column panels split between threads), what `gemm` sends f32 products to on this CPU
(the tile or BLAS, `blas.tile_is_faster()`), f64 products on BLAS."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cuvil.runtime.blas import gemm, gemm_batched
from cuvil.runtime.sgemm import sgemm

dims = st.tuples(st.integers(0, 70), st.integers(0, 40), st.integers(0, 90))


def _operands(m, k, n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)


@settings(max_examples=60, deadline=None)
@given(dims, st.sampled_from([1, 2]))
def test_f32_tile_matches_numpy(shape, parts):
    a, b = _operands(*shape, np.float32)
    c = np.full((shape[0], shape[2]), np.nan, np.float32)
    sgemm(a, b, c, parts)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_gemm_dispatches_both_dtypes_and_splits_large_products():
    for dtype in (np.float32, np.float64):
        for m, k, n in [(64, 784, 512), (3, 700, 900), (513, 130, 129)]:  # rows; columns
            a, b = _operands(m, k, n, dtype)
            c = np.full((m, n), np.nan, dtype)
            gemm(a, b, c, 2)
            np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_batched_products():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((6, 33, 64)).astype(np.float32)
    b = rng.standard_normal((6, 64, 170)).astype(np.float32)
    c = np.full((6, 33, 170), np.nan, np.float32)
    gemm_batched(a, b, c, 2)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
