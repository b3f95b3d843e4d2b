"""`kernels/mkl.py`: where torch ships MKL and the CPU is Intel's, big products call MKL's
`?gemm` on each Numba thread alone. Its blocks equal torch's product (f64 reference) for
C- and F-contiguous operands, row and column blocks, f32 and f64; a call leaves the calling
thread's MKL setting as it was (torch's own products on that thread keep their threads);
`CUVIL_BLAS=openblas` opts out; the choice is part of the runtime's cache key."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch

from cuvil.runtime.numba_cache import njit, runtime_hash
from cuvil.targets.cpu.kernels import mkl
from cuvil.targets.cpu.kernels.blas import gemm

needs_mkl = pytest.mark.skipif(mkl.library() != "mkl", reason="products do not call MKL here")


@njit(nogil=True)
def _one_block(a, b, c, r0, r1, n0, n1):
    mkl.mkl_block(a, b, c, r0, r1, n0, n1)


def operand(matrix: np.ndarray, transposed: bool) -> np.ndarray:
    return np.ascontiguousarray(matrix.T).T if transposed else matrix


@needs_mkl
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sides", ["", "a", "b", "ab"])
def test_a_block_through_mkl_matches_torch(dtype, sides):
    rng = np.random.default_rng(len(sides))
    m, k, n = 37, 29, 45
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    expected = (torch.from_numpy(a).double() @ torch.from_numpy(b).double()).numpy()
    out = np.full((m, n), np.nan, dtype)
    left, right = operand(a, "a" in sides), operand(b, "b" in sides)
    for r0, r1, n0, n1 in ((0, 20, 0, n), (20, m, 0, 16), (20, m, 16, n)):  # blocks tile c
        _one_block(left, right, out, r0, r1, n0, n1)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol * k)


@needs_mkl
@pytest.mark.parametrize("m, k, n", [(32, 784, 512), (784, 32, 512), (300, 300, 300)])
def test_split_products_through_mkl_match_torch(m, k, n):
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    expected = (torch.from_numpy(a).double() @ torch.from_numpy(b).double()).numpy()
    for right in (b, operand(b, True)):
        out = np.full((m, n), np.nan, np.float32)
        gemm(a, right, out, 2)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * k)


def _local_threads(lib) -> int:
    """This thread's MKL setting (0: unset), read and put back."""
    value = lib.MKL_Set_Num_Threads_Local(0)
    lib.MKL_Set_Num_Threads_Local(value)
    return value


@needs_mkl
@pytest.mark.parametrize("setting", [0, 2])
def test_a_call_puts_the_threads_mkl_setting_back(setting):
    lib = mkl._torch_mkl()
    was = lib.MKL_Set_Num_Threads_Local(setting)
    try:
        a = np.ones((256, 256), np.float32)
        out = np.empty_like(a)
        gemm(a, a, out, 1)  # one block on this thread, through MKL
        assert _local_threads(lib) == setting
        np.testing.assert_array_equal(out, np.full_like(a, 256.0))
    finally:
        lib.MKL_Set_Num_Threads_Local(was)


def test_the_choice_opts_out_and_keys_the_cache(monkeypatch):
    monkeypatch.setenv("CUVIL_BLAS", "openblas")
    assert mkl.library.__wrapped__() == "openblas"
    assert runtime_hash().endswith("-mkl") == (mkl.library() == "mkl")


def test_mkl_is_bound_only_where_torch_exports_it():
    found = mkl._torch_mkl()
    if mkl.library() == "mkl":
        assert found is not None
        assert ctypes.cast(found.SGEMM, ctypes.c_void_p).value
    elif found is None:
        assert mkl.library() == "openblas"
