"""`cuvil.runtime.mlp.mlp_post` called directly on packed panels against float64 numpy:
one region for both products at up to FUSED_ROWS rows (the second split along its inner
dim between threads), the two products past that; each epilogue part, odd widths (column
tails; up to 8 threads, more than there are panels), K = 0 and one thread."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cuvil.lower.templates.gemm import PANEL, panels
from cuvil.runtime.mlp import FUSED_ROWS, mlp_post

MODE = np.array([0, 3, 1 << 15, FUSED_ROWS], np.int64)
EMPTY = np.zeros(0, np.float32)


def _reference(x, w1, b1, w2, b2, res, clip):
    h = np.maximum(x.astype(np.float64) @ w1 + b1, 0)
    return np.clip(h @ w2 + b2 + res, *clip)


def _run(x, w1, b1, w2, b2, res, clip, parts):
    hidden = np.full((*x.shape[:-1], w1.shape[1]), np.nan, np.float32)
    out = np.full((*x.shape[:-1], w2.shape[1]), np.nan, np.float32)
    relu = np.array([0, np.inf], np.float32)
    mlp_post(x, w1, panels(w1), b1, relu, w2, panels(w2), b2 if b2.size else EMPTY,
             res, np.array(clip, np.float32), MODE, parts, hidden, out)
    return out


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([1, 2, FUSED_ROWS, FUSED_ROWS + 1, 20]), st.integers(0, 70),
       st.integers(PANEL, 130), st.integers(PANEL, 100), st.sampled_from([1, 2, 3, 8]),
       st.booleans(), st.booleans(), st.booleans())
def test_the_pair_matches_its_two_layers(rows, k, n1, n2, parts, bias, residual, relu):
    rng = np.random.default_rng(rows * 1000 + k)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    w1 = rng.standard_normal((k, n1)).astype(np.float32)
    w2 = rng.standard_normal((n1, n2)).astype(np.float32) * 0.2
    b1 = rng.standard_normal(n1).astype(np.float32)
    b2 = rng.standard_normal(n2).astype(np.float32) if bias else EMPTY
    res = rng.standard_normal((rows, n2)).astype(np.float32) if residual \
        else np.zeros((0, 0), np.float32)
    clip = (0.0, np.inf) if relu else (-np.inf, np.inf)
    got = _run(x, w1, b1, w2, b2, res, clip, parts)
    want = _reference(x, w1, b1, w2, b2 if bias else 0, res if residual else 0, clip)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("rows", [1, 40])
def test_rows_of_any_rank_and_nan_kept(rows):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, 3, 64)).astype(np.float32)
    x[0, 1, 5] = np.nan  # its row's hidden values and outputs are NaN, the others not
    w1 = rng.standard_normal((64, 96)).astype(np.float32)
    w2 = rng.standard_normal((96, 40)).astype(np.float32)
    b1, b2 = np.zeros(96, np.float32), np.zeros(40, np.float32)
    got = _run(x, w1, b1, w2, b2, np.zeros((0, 0, 0), np.float32), (0.0, np.inf), 2)
    want = _reference(x, w1, b1, w2, b2, 0, (0.0, np.inf))
    assert np.isnan(got[0, 1]).all() and not np.isnan(np.delete(got.reshape(-1, 40), 1, 0)).any()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
