"""`blas.gemm_weight` on transposed operands: an F-contiguous `a` or `b` (the `.T` of a
C-contiguous matrix, as the GEMM template passes `matmul_lt`/`matmul_rt`'s operands) is
read in place with its strides swapped; the product equals torch's on either side, both,
odd shapes, one row, an inner dim of 0, f32 and f64, on one thread and two (rows split,
columns split)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cuvil.targets.cpu.kernels.blas import gemm_weight

SHAPES = [(1, 7, 5), (3, 1, 1), (37, 13, 70), (200, 33, 9), (5, 0, 3), (32, 784, 512)]


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
