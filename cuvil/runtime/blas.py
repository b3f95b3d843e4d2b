"""Matrix products shared by every generated module, and the BLAS thread policy.

f32 products take Cuvil's own register tile (`cuvil.runtime.sgemm`) on the CPUs where it
was measured faster than OpenBLAS (`TILE_CPUS`: on a Zen 4 core 5-25% on the zoo's
products), BLAS elsewhere and for other dtypes: on an Intel Rocket Lake Xeon (2.0 GHz, one
512-bit FMA unit) the tile took 1.1-1.5x OpenBLAS's time on every zoo product, two
threads (64x784 @ 784x512: 66 against 91 GFLOP/s; 1024x256 @ 256x768: 107 against 156).
The choice is made when a product is typed; Numba's cache keys on the CPU's name too.

One pool: scipy's OpenBLAS (the BLAS Numba calls) runs
single-threaded, and products are split between Numba's threads instead (`gemm`: row
blocks; `gemm_batched`: batch entries).
OpenBLAS's own pthread pool spin-waits after each call; next to torch's OpenMP pool it
made a 16-image NCHW convolution take 255 ms instead of 8 ms, and torch's own convolution
next to it 50 ms instead of 1.5 ms. `single_threaded_blas()` sets this once per process.

`gemv(a, wt, c, parts)` computes `c = a @ wt.T` for a handful of rows of `a` as dot
products against the rows of the pre-transposed weight `wt`, four output columns at a time
(each load of `a` feeds four multiply-adds); with `parts > 1` the columns are split between
threads. For 1-8 rows this beats BLAS here: 784x512 in 20 us on 2 threads, `np.dot` 27.

These functions are compiled once per cache directory (`numba_cache.njit`) rather
than in every generated module: a parallel function costs ~1.5 s to compile, and this is
the only parallel code a small MLP needs. Generated modules quote the runtime's source
hash (`numba_cache.runtime_hash`), so a change here gives them new cache entries.
"""

from __future__ import annotations

import os

import numpy as np
from numba import prange, types
from numba.extending import overload

from cuvil.runtime.numba_cache import njit
from cuvil.runtime.sgemm import sgemm

GEMV_PAR_WORK = 1 << 16  # multiply-adds below which one thread is faster
GEMM_PAR_WORK = 1 << 20  # multiply-adds below which one BLAS call on one thread is faster
_blas_configured = False


def single_threaded_blas() -> None:
    """Make scipy's OpenBLAS (the one Numba's `np.dot` calls) single-threaded, once, unless
    OPENBLAS_NUM_THREADS is set; numpy's and torch's pools are left as they are."""
    global _blas_configured
    if _blas_configured or os.environ.get("OPENBLAS_NUM_THREADS"):
        return
    _blas_configured = True
    _load_scipy_blas()
    from threadpoolctl import ThreadpoolController

    for lib in ThreadpoolController().lib_controllers:
        if lib.user_api == "blas" and f"scipy.libs{os.sep}" in lib.filepath:
            lib.set_num_threads(1)


def _load_scipy_blas() -> None:
    """Load scipy's OpenBLAS into the process: the shared library of
    `scipy.linalg.cython_blas` with its dependencies, without running the Python package
    `scipy.linalg` (importing it costs ~0.2 s, its array-API layer importing numpy.f2py,
    numpy.testing and more). The later import of `cython_blas` (by Numba's `np.dot`)
    finds the same library, with the threads set here. Where the file is not found,
    the import."""
    import ctypes
    import importlib.machinery
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("scipy")
    for folder in spec.submodule_search_locations if spec else ():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(folder) / "linalg" / f"cython_blas{suffix}"
            if path.is_file():
                try:
                    ctypes.CDLL(str(path))
                    return
                except OSError:
                    break
    import scipy.linalg.cython_blas  # noqa: F401


@njit(nogil=True, fastmath=True)
def gemv_block(a, wt, c, n0, n1):
    k_len = a.shape[1]
    for m in range(a.shape[0]):
        if k_len == 0:
            for n in range(n0, n1):
                c[m, n] = 0
            continue
        n = n0
        while n + 4 <= n1:
            av = a[m, 0]
            s0 = wt[n, 0] * av
            s1 = wt[n + 1, 0] * av
            s2 = wt[n + 2, 0] * av
            s3 = wt[n + 3, 0] * av
            for k in range(1, k_len):
                av = a[m, k]
                s0 += wt[n, k] * av
                s1 += wt[n + 1, k] * av
                s2 += wt[n + 2, k] * av
                s3 += wt[n + 3, k] * av
            c[m, n] = s0
            c[m, n + 1] = s1
            c[m, n + 2] = s2
            c[m, n + 3] = s3
            n += 4
        while n < n1:
            s0 = wt[n, 0] * a[m, 0]
            for k in range(1, k_len):
                s0 += wt[n, k] * a[m, k]
            c[m, n] = s0
            n += 1


@njit(nogil=True, parallel=True)
def gemv_parallel(a, wt, c, parts):
    n_len = wt.shape[0]
    step = ((n_len + parts - 1) // parts + 3) // 4 * 4
    for t in prange(parts):
        gemv_block(a, wt, c, min(n_len, t * step), min(n_len, (t + 1) * step))


@njit(nogil=True)
def gemv(a, wt, c, parts):
    """c[m, n] = sum_k a[m, k] * wt[n, k]; `parts` threads when the product is big enough."""
    if parts > 1 and a.shape[0] * a.shape[1] * wt.shape[0] >= GEMV_PAR_WORK:
        gemv_parallel(a, wt, c, parts)
    else:
        gemv_block(a, wt, c, 0, wt.shape[0])


TILE_CPUS = ("znver4", "znver5")  # LLVM's names of the CPUs the f32 tile is faster on


def tile_is_faster() -> bool:
    """Whether f32 products take the register tile on this CPU (LLVM's name for it)."""
    from llvmlite import binding

    return binding.get_host_cpu_name() in TILE_CPUS


def _product(a, b, c, parts):
    """c = a @ b on `parts` threads: the f32 tile, or BLAS (typed in `_product_for`)."""


@overload(_product)
def _product_for(a, b, c, parts):
    arrays = (a, b, c)
    if tile_is_faster() and all(x.dtype == types.float32 and x.layout == "C" for x in arrays):
        return lambda a, b, c, parts: sgemm(a, b, c, parts)
    return lambda a, b, c, parts: _blas(a, b, c, parts)


@njit(nogil=True, parallel=True)
def _blas_parallel(a, b, c, parts):
    m = a.shape[0]
    step = (m + parts - 1) // parts
    for t in prange(parts):
        r0 = min(m, t * step)
        r1 = min(m, r0 + step)
        if r1 > r0:
            np.dot(a[r0:r1], b, c[r0:r1])


@njit(nogil=True)
def _blas(a, b, c, parts):
    if parts > 1 and a.shape[0] >= 2 * parts:
        _blas_parallel(a, b, c, parts)
    else:
        np.dot(a, b, c)


@njit(nogil=True)
def gemm(a, b, c, parts):
    """c = a @ b (2-d, C-contiguous), split between `parts` threads when it is big enough."""
    big = a.shape[0] * a.shape[1] * b.shape[1] >= GEMM_PAR_WORK
    _product(a, b, c, parts if big else 1)


@njit(nogil=True, parallel=True)
def _batched_parallel(a, b, c, parts):
    nb = a.shape[0]
    for t in prange(parts):
        for i in range(t, nb, parts):
            _product(a[i], b[i], c[i], 1)


@njit(nogil=True)
def gemm_batched(a, b, c, parts):
    """c[i] = a[i] @ b[i] (3-d), batch entries split between `parts` threads."""
    if parts > 1 and a.shape[0] >= parts and \
            a.size * b.shape[2] >= GEMM_PAR_WORK:
        _batched_parallel(a, b, c, parts)
    else:
        for i in range(a.shape[0]):
            gemm(a[i], b[i], c[i], parts)
