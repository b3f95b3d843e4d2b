"""`cuvil.targets.cpu.kernels.mlp.mlp_post` called directly on packed panels against float64 numpy:
one region for both products at up to FUSED_ROWS rows (the second split along its inner
dim between threads), the two products past that; each epilogue part, odd widths (column
tails; up to 8 threads, more than there are panels), K = 0 and one thread. Then
`mlp_head_post`, the pair and an output layer narrower or wider than a panel."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cuvil.targets.cpu.kernels.mlp import FUSED_ROWS, mlp_head_post, mlp_post
from cuvil.targets.cpu.templates.gemm import PANEL, narrow, panels

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


@settings(max_examples=20, deadline=None)
@given(st.sampled_from([1, FUSED_ROWS, FUSED_ROWS + 1]), st.integers(1, 50),
       st.sampled_from([3, PANEL - 1, PANEL + 5]), st.sampled_from([1, 2, 3]), st.booleans())
def test_the_head_matches_its_three_layers(rows, k, n3, parts, residual):
    rng = np.random.default_rng(rows * 100 + k)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    w1, w2, w3 = (rng.standard_normal(s).astype(np.float32) * 0.3
                  for s in ((k, 40), (40, 70), (70, n3)))
    b1, b2, b3 = (rng.standard_normal(n).astype(np.float32) for n in (40, 70, n3))
    res = rng.standard_normal((rows, n3)).astype(np.float32) if residual \
        else np.zeros((0, 0), np.float32)
    relu, none = np.array([0, np.inf], np.float32), np.array([-np.inf, np.inf], np.float32)
    hidden, hidden2 = np.full((rows, 40), np.nan, np.float32), np.full((rows, 70), np.nan,
                                                                        np.float32)
    out = np.full((rows, n3), np.nan, np.float32)
    p3 = narrow(w3) if n3 < PANEL else panels(w3)
    mlp_head_post(x, w1, panels(w1), b1, relu, w2, panels(w2), b2, relu, w3, p3, b3, res,
                  none, MODE, parts, hidden, hidden2, out)
    h = _reference(x, w1, b1, w2, b2, 0, (0.0, np.inf))
    want = h @ w3 + b3 + (res if residual else 0)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)
