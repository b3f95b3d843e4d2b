"""`blas.gemm_weight` on transposed operands: an F-contiguous `a` or `b` (the `.T` of a
C-contiguous matrix, as the GEMM template passes `matmul_lt`/`matmul_rt`'s operands) is
read in place with its strides swapped; the product equals torch's on either side, both,
odd shapes, one row, an inner dim of 0, f32 and f64, on one thread and two (rows split,
columns split). x @ w^T in f32 takes the tile on w in place (`sgemm.sgemm_transposed`)
for a few rows: the same values."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cuvil.targets.cpu.kernels.blas import gemm_weight
from cuvil.targets.cpu.kernels.sgemm import panels_of_rows, sgemm_transposed

SHAPES = [(1, 7, 5), (3, 1, 1), (37, 13, 70), (200, 33, 9), (130, 2048, 1100), (5, 0, 3),
          (16, 0, 80), (32, 784, 512)]


def operand(matrix: np.ndarray, transposed: bool) -> np.ndarray:
    """`matrix` itself, or the same values as the transpose of a C-contiguous array."""
    return np.ascontiguousarray(matrix.T).T if transposed else matrix


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, k, n", SHAPES)
@pytest.mark.parametrize("sides", ["a", "b", "ab"])
def test_transposed_operands_match_torch(dtype, m, k, n, sides):
    rng = np.random.default_rng(m * 1000 + k + n)
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    left, right = operand(a, "a" in sides), operand(b, "b" in sides)
    assert left.flags.f_contiguous == ("a" in sides and m > 1 and k > 1) or \
        left.flags.c_contiguous
    expected = (torch.from_numpy(a).double() @ torch.from_numpy(b).double()).numpy()
    tol = 1e-4 if dtype == np.float32 else 1e-10
    for threads in (1, 2):
        out = np.full((m, n), np.nan, dtype)
        gemm_weight(left, right, np.zeros((0, 0), dtype), out, threads, 3)
        np.testing.assert_allclose(out, expected, rtol=tol, atol=tol * max(k, 1))


@pytest.mark.parametrize("m", [1, 8, 31, 32, 33, 64, 70])
@pytest.mark.parametrize("threads", [1, 2])
def test_the_tile_on_a_transposed_weight_matches_torch(m, threads):
    """`sgemm.sgemm_transposed` (x @ w^T with the tile on w [N, K] in place), called
    directly, and through `gemm_weight` where its rows and columns choose it."""
    rng = np.random.default_rng(m)
    for n, k in ((70, 13), (512, 784), (9, 5)):
        x = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((n, k)).astype(np.float32)
        expected = (torch.from_numpy(x).double() @ torch.from_numpy(w).double().T).numpy()
        for product in (sgemm_transposed, lambda a, b, c, p: gemm_weight(
                a, b, np.zeros((0, 0), np.float32), c, p, 3)):
            out = np.full((m, n), np.nan, np.float32)
            product(x, w.T, out, threads)
            np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * k)


def test_panels_of_rows_pad_with_zeros():
    a = np.arange(35 * 3, dtype=np.float32).reshape(35, 3)
    panels = panels_of_rows(a)
    assert panels.shape == (2, 3, 32)
    np.testing.assert_array_equal(panels[0], a[:32].T)
    np.testing.assert_array_equal(panels[1, :, :3], a[32:].T)
    assert not panels[1, :, 3:].any()
