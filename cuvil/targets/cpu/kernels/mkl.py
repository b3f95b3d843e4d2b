"""MKL's `?gemm`, where torch ships it, for the products `blas` splits between Numba's threads.

torch's x86 wheels link Intel MKL into `libtorch_cpu` and export its Fortran `SGEMM` and
`DGEMM`. On an Intel CPU they are faster than scipy's OpenBLAS on every product of the bench
models, one thread each (2-core Xeon, AVX-512, us): 32x784 @ 784x512 190 against 280,
784x32 @ 32x512 (a weight's gradient) 166 against 235, 1024x256 @ 256x768 2495 against 2835.
`library()` says which BLAS the products call: "mkl" there, "openblas" elsewhere (no MKL
exported, another vendor's CPU, or `CUVIL_BLAS=openblas`). The choice is part of the
runtime's cache key (`numba_cache.runtime_hash`): code compiled to call MKL is never
loaded where MKL is not bound.

Compiled code calls MKL by symbol (`cuvil_mkl_sgemm`, registered with LLVM at import, as
Numba registers its own `numba_xxgemm`). Each call runs on the calling Numba thread alone
(`MKL_Set_Num_Threads_Local(1)`, then the thread's setting put back): MKL's own OpenMP pool
is torch's, and a call from a Numba thread would otherwise start a team there.
"""

from __future__ import annotations

import ctypes
import os
from functools import cache
from pathlib import Path

import numpy as np
from numba import types
from numba.extending import overload

MIN_WORK = 1 << 20  # multiply-adds below which one call to OpenBLAS is faster (~5 us less)
SYMBOLS = {"cuvil_mkl_sgemm": "SGEMM", "cuvil_mkl_dgemm": "DGEMM",
           "cuvil_mkl_local_threads": "MKL_Set_Num_Threads_Local"}


@cache
def library() -> str:
    """"mkl" where torch exports MKL's products and the CPU is Intel's (the symbols then
    registered), else "openblas"."""
    if os.environ.get("CUVIL_BLAS", "").lower() == "openblas" or not _intel_cpu():
        return "openblas"
    found = _torch_mkl()
    if found is None:
        return "openblas"
    from llvmlite import binding

    for symbol, name in SYMBOLS.items():
        binding.add_symbol(symbol, ctypes.cast(getattr(found, name), ctypes.c_void_p).value)
    return "mkl"


def _intel_cpu() -> bool:
    try:
        return "GenuineIntel" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def _torch_mkl():
    """torch's CPU library, where it exports the MKL functions of SYMBOLS; else None."""
    import torch

    folder = Path(torch.__file__).parent / "lib"
    for path in sorted(folder.glob("libtorch_cpu.*")):
        try:
            lib = ctypes.CDLL(str(path))  # loaded already by torch: the same handle
        except OSError:
            continue
        if all(hasattr(lib, name) for name in SYMBOLS.values()):
            return lib
    return None


def _fortran_gemm(symbol: str, dtype):
    """`?gemm` with Fortran's conventions: every argument by pointer."""
    p, i, ch = types.CPointer(dtype), types.CPointer(types.int32), types.CPointer(types.uint8)
    return types.ExternalFunction(symbol, types.void(ch, ch, i, i, i, p, p, i, p, i, p, p, i))


GEMM = {types.float32: _fortran_gemm("cuvil_mkl_sgemm", types.float32),
        types.float64: _fortran_gemm("cuvil_mkl_dgemm", types.float64)}
LOCAL_THREADS = types.ExternalFunction("cuvil_mkl_local_threads", types.int32(types.int32))


def mkl_block(a, b, c, r0, r1, n0, n1):
    """c[r0:r1, n0:n1] = a[r0:r1] @ b[:, n0:n1] through MKL, on the calling thread alone,
    for C- or F-contiguous a and b and a C-contiguous c (as `blas._block`)."""


@overload(mkl_block)
def _mkl_block_for(a, b, c, r0, r1, n0, n1):
    gemm, local_threads = GEMM[a.dtype], LOCAL_THREADS
    # column-major, as `blas._block`: c.T[n0:n1, r0:r1] = b.T[n0:n1] @ a.T[:, r0:r1]
    trans_b, trans_a = (ord("N" if x.layout == "C" else "T") for x in (b, a))
    b_rows, a_rows = b.layout == "C", a.layout == "C"

    def block(a, b, c, r0, r1, n0, n1):
        scalars = np.array([1.0, 0.0], a.dtype)
        flags = np.array([trans_b, trans_a], np.uint8)
        m, k = a.shape
        n = b.shape[1]
        dims = np.array([n1 - n0, r1 - r0, k, n if b_rows else max(k, 1),
                         max(k, 1) if a_rows else max(m, 1), max(n, 1)], np.int32)
        was = local_threads(1)
        gemm(flags.ctypes, flags[1:].ctypes, dims.ctypes, dims[1:].ctypes, dims[2:].ctypes,
             scalars.ctypes, b[:, n0:].ctypes, dims[3:].ctypes, a[r0:].ctypes,
             dims[4:].ctypes, scalars[1:].ctypes, c[r0:, n0:].ctypes, dims[5:].ctypes)
        local_threads(was)
    return block
