"""`cuvil.targets.cpu.kernels.blas.gemm` and `gemm_batched` against numpy in float64: Cuvil's f32
register tile (`sgemm`, called directly: row and column tails, K = 0, empty products, rows
or column panels split between threads), what `gemm` sends f32 products to on this CPU
(the tile or BLAS, `blas.tile_is_faster()`), f64 products on BLAS; products by a constant
weight as lowering prepares it (`gemm_weight`: f32 panels, f32 narrower than a panel
also as rows, f64 transposed, or nothing)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cuvil.targets.cpu.kernels.blas import PANEL_MAX_ROWS, gemm, gemm_batched, gemm_weight
from cuvil.targets.cpu.kernels.sgemm import sgemm
from cuvil.targets.cpu.templates.gemm import PANEL, narrow, panels

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
    """Few rows: column blocks (BLAS) or panels (tile); many rows: row blocks."""
    for dtype in (np.float32, np.float64):
        for m, k, n in [(64, 784, 512), (3, 700, 900), (70, 50, 333), (513, 130, 129)]:
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


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 3, 9, 64, PANEL_MAX_ROWS + 1]), st.integers(0, 140),
       st.integers(1, 100), st.sampled_from([1, 2]))
def test_products_by_a_packed_f32_weight(m, k, n, parts):
    """The tile on panels (one-row and 8-row tiles, column tails, panels or rows split
    between threads) and BLAS past PANEL_MAX_ROWS rows, against float64."""
    a, w = _operands(m, k, n, np.float32)
    c = np.full((m, n), np.nan, np.float32)
    gemm_weight(a, w, panels(w), c, parts, 3)
    np.testing.assert_allclose(c, a.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 3, 4, 9, 64]), st.integers(0, 90), st.integers(1, PANEL - 1),
       st.sampled_from([1, 2]))
def test_products_by_a_narrow_f32_weight_read_the_form_their_rows_need(m, k, n, parts):
    """A weight narrower than a panel (`narrow`): up to 3 rows of `a` read its rows alone
    (`gemv`), more rows its panel alone; the part not read is NaN here."""
    a, w = _operands(m, k, n, np.float32)
    packed, c = narrow(w), np.full((m, n), np.nan, np.float32)
    unread = slice(k * PANEL, None) if m > 3 else slice(0, k * PANEL)
    packed[unread] = np.nan
    gemm_weight(a, w, packed, c, parts, 3)
    np.testing.assert_allclose(c, a.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)


def test_products_by_a_transposed_f64_weight_or_none():
    for m in (1, 3, 4, 70):
        a, w = _operands(m, 50, 70, np.float64)
        for packed in (np.ascontiguousarray(w.T), np.zeros((0, 0))):
            c = np.full((m, 70), np.nan)
            gemm_weight(a, w, packed, c, 2, 3)
            np.testing.assert_allclose(c, a @ w, rtol=1e-10, atol=1e-10)
