"""`gemv(a, wt, c, parts)`: `c = a @ wt.T` for a handful of rows of `a`, as dot products
against the rows of the pre-transposed weight `wt`, four output columns at a time (each
load of `a` feeds four multiply-adds); with `parts > 1` the columns are split between
threads. `blas.gemm_weight` takes it for products by a constant weight with few rows (an
f64 weight kept transposed, an f32 one narrower than a panel).

Compiled once per cache directory (`numba_cache.njit`), like the other drivers: generated
modules quote the runtime's source hash (`numba_cache.runtime_hash`), so a change here
gives them new cache entries.
"""

from __future__ import annotations

from numba import prange

from cuvil.runtime.numba_cache import njit

GEMV_PAR_WORK = 1 << 16  # multiply-adds below which one thread is faster


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


@njit(nogil=True, parallel=True, link=False)
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
