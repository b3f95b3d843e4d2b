"""f32 matrix products on the register tile of `f32_tile`: `c = a @ b` for C-contiguous 2-d
arrays, without BLAS, from `b` itself (`sgemm`) or from a constant `b` packed at compile
time into column panels (`sgemm_panels`). `kernels.blas` decides which products come
here: those by a packed weight with up to a few hundred rows, and on the CPUs in
`blas.TILE_CPUS` (where the tile on `b` itself was measured faster than OpenBLAS) all f32.

The tile takes 8 rows of `a` (one broadcast each per step along K) against 32 columns of
`b` (two vector loads), 16 FMAs per step, written straight into `c` with masked tails,
through an epilogue (bias, residual, clip: `f32_tile.post_tile_kernel`) when one is given;
tiles of 1-2 rows take a one-row tile instead. Column panels are the outer loop, so a
panel of `b` (K x 32) stays in cache while the row tiles stream past it. Threads split
rows (8-row tiles) when there are enough, else column panels. On `b` itself each step
reads one row of `b` (two lines N floats apart); a packed panel [K, 32] is one contiguous
run, which on an Intel Xeon that LLVM calls `rocketlake` made the tile faster than
OpenBLAS on products of up to ~256 rows (64x784 @ 784x512 on two threads: 423 us against
BLAS's 499, and 845 on `b` itself). Measured on a Zen 4 against scipy's OpenBLAS, on `b`
itself: 5-25% faster on the zoo's products (64x784 @ 784x512: 280 us against 369), ~105
GFLOP/s per core.

`sgemm_transposed` computes x @ w^T for a weight w [N, K] as torch keeps it (training
graphs' `mm(x, t(w))`) as (w @ x^T)^T: w read in place as the tile's broadcast operand
(`block_strided`: any strides), the few rows of x packed as panels, so the weight is never
copied.
"""

from __future__ import annotations

import numpy as np
from numba import prange
from numba.extending import overload

from cuvil.runtime.numba_cache import njit
from cuvil.targets.cpu.kernels.f32_tile import LANES, MR, no_epilogue, post_tile_kernel

_T1, _T2 = post_tile_kernel(1), post_tile_kernel(2)
_ROW = post_tile_kernel(2, 1)  # one row: for tiles of 1-2 rows, where 8 would waste the FMAs
WIDTH = 2 * LANES  # columns per tile


@njit(nogil=True, fastmath=True)
def block_at(af, a0, lda, bf, b0, kstride, jstride, cf, c0, ldc, kd, m0, m1, n0, n1, epi):
    """Rows m0..m1, columns n0..n1 of c = epi(a @ b) on flat arrays: a's row r at af[a0 +
    r * lda], b's column j of row k at bf[b0 + j * jstride + k * kstride], c's row r at
    cf[c0 + r * ldc] (a slice of a bigger array: attention's heads read in place); `epi`
    = (bias [N], residual, lo, hi, flags) applied in the tile's stores
    (`f32_tile.post_tile_kernel`)."""
    block_strided(af, a0, 1, lda, bf, b0, kstride, jstride, cf, c0, ldc, kd, m0, m1, n0, n1,
                  epi)


@njit(nogil=True, fastmath=True)
def block_strided(af, a0, ak, am, bf, b0, kstride, jstride, cf, c0, ldc, kd, m0, m1, n0, n1,
                  epi):
    """`block_at` with a's element (r, k) at af[a0 + r * am + k * ak]: any strides, so a
    transposed matrix is read in place."""
    bias, res, lo, hi, flags = epi
    for j in range(n0, n1, WIDTH):
        cols, bj = min(WIDTH, n1 - j), b0 + j * jstride
        for i in range(m0, m1, MR):
            rows = min(MR, m1 - i)
            if rows <= 2:
                for r in range(i, i + rows):
                    _ROW(bf, bj, kstride, kd, af, a0 + r * am, ak, am, cf, c0 + r * ldc + j,
                         ldc, 1, cols, bias, j, res, lo, hi, flags)
            elif cols > LANES:
                _T2(bf, bj, kstride, kd, af, a0 + i * am, ak, am, cf, c0 + i * ldc + j, ldc,
                    rows, cols, bias, j, res, lo, hi, flags)
            else:
                _T1(bf, bj, kstride, kd, af, a0 + i * am, ak, am, cf, c0 + i * ldc + j, ldc,
                    rows, cols, bias, j, res, lo, hi, flags)


@njit(nogil=True, fastmath=True)
def _block(a, bf, c, kstride, jstride, m0, m1, n0, n1, epi):
    """c[m0:m1, n0:n1] = epi(a[m0:m1] @ b[:, n0:n1]), `b` flat in `bf`: column j of row k
    at bf[j * jstride + k * kstride] (`b` itself: jstride 1, kstride N; panels: jstride K,
    kstride WIDTH, for j a multiple of WIDTH)."""
    kd = a.shape[1]
    block_at(a.reshape(a.size), 0, kd, bf, 0, kstride, jstride, c.reshape(c.size), 0,
             c.shape[1], kd, m0, m1, n0, n1, epi)


@njit(nogil=True, parallel=True, link=False)
def _parallel(a, bf, c, kstride, jstride, parts, row_min, epi):
    """Row tiles split between threads from `row_min` rows on, else column panels."""
    m, n = a.shape[0], c.shape[1]
    by_rows = m >= 2 * MR * parts and (m >= row_min or n <= WIDTH * (parts - 1))
    unit = MR if by_rows else WIDTH
    units = ((m if by_rows else n) + unit - 1) // unit
    step = (units + parts - 1) // parts * unit
    for t in prange(parts):
        lo, hi = t * step, (t + 1) * step
        if by_rows:
            _block(a, bf, c, kstride, jstride, min(m, lo), min(m, hi), 0, n, epi)
        else:
            _block(a, bf, c, kstride, jstride, 0, m, min(n, lo), min(n, hi), epi)


@njit(nogil=True)
def sgemm(a, b, c, parts):
    """c = a @ b (f32, 2-d, C-contiguous) on `parts` threads (1: this thread)."""
    bf = b.reshape(b.size)
    if parts > 1:
        _parallel(a, bf, c, b.shape[1], 1, parts, 0, no_epilogue())
    else:
        _block(a, bf, c, b.shape[1], 1, 0, a.shape[0], 0, b.shape[1], no_epilogue())


@njit(nogil=True, link=False)
def sgemm_panels(a, panels, c, parts, row_min, epi):
    """c = epi(a @ b) (`_block`), with `b` [K, N] packed as `panels` [ceil(N / WIDTH), K,
    WIDTH] (columns past N zero): each step along K reads one contiguous line pair, not a
    row of `b`."""
    bf = panels.reshape(panels.size)
    if parts > 1:
        _parallel(a, bf, c, WIDTH, a.shape[1], parts, row_min, epi)
    else:
        _block(a, bf, c, WIDTH, a.shape[1], 0, a.shape[0], 0, c.shape[1], epi)


@njit(nogil=True)
def sgemm_transposed(a, b, c, parts):
    """c = a @ b (f32, 2-d; a and b C- or F-contiguous, c C-contiguous) as c^T = b^T @ a^T
    on the tile: the few rows of a packed into column panels (`panels_of_rows`), b^T read in
    place through its strides as the tile's broadcast operand, c^T in a scratch, then
    transposed into c. For a batch against a weight read transposed, x @ w^T with w [N, K]
    as torch keeps it: only x (M x K) is packed, never the weight."""
    m, kd, n = a.shape[0], a.shape[1], b.shape[1]
    if m == 0 or n == 0:
        return
    panels = panels_of_rows(a)
    ct = np.empty((n, m), np.float32)
    bk, bn = b.strides[0] // 4, b.strides[1] // 4  # b^T's (row, k) at row * bn + k * bk
    bf, pf, cf = _flat_view(b), panels.reshape(panels.size), ct.reshape(ct.size)
    if parts > 1 and n >= 2 * MR * parts:
        _rows_parallel(bf, bk, bn, pf, cf, m, kd, n, parts)
    else:
        block_strided(bf, 0, bk, bn, pf, 0, WIDTH, kd, cf, 0, m, kd, 0, n, 0, m, no_epilogue())
    for r in range(n):
        for i in range(m):
            c[i, r] = ct[r, i]


@njit(nogil=True, parallel=True, link=False)
def _rows_parallel(bf, bk, bn, pf, cf, m, kd, n, parts):
    step = ((n + MR - 1) // MR + parts - 1) // parts * MR
    for t in prange(parts):
        lo, hi = min(n, t * step), min(n, (t + 1) * step)
        block_strided(bf, 0, bk, bn, pf, 0, WIDTH, kd, cf, 0, m, kd, lo, hi, 0, m,
                      no_epilogue())


@njit(nogil=True)
def panels_of_rows(a):
    """a [M, K] as the column panels of a^T: [ceil(M / WIDTH), K, WIDTH], panel p's row k
    holding a[p * WIDTH:(p + 1) * WIDTH, k], zero past M; written in order, one line at a
    time (row by row of a, each write 128 bytes from the last, took twice as long)."""
    m, kd = a.shape
    count = (m + WIDTH - 1) // WIDTH
    out = np.empty((count, kd, WIDTH), np.float32)
    flat = out.reshape(out.size)
    for p in range(count):
        rows = min(WIDTH, m - p * WIDTH)
        for k in range(kd):
            base = (p * kd + k) * WIDTH
            for lane in range(rows):
                flat[base + lane] = a[p * WIDTH + lane, k]
            for lane in range(rows, WIDTH):
                flat[base + lane] = 0.0
    return out


def _flat_view(x):
    """The elements of a C- or F-contiguous 2-d array in memory order, flat (typed in
    `_flat_view_for`)."""


@overload(_flat_view)
def _flat_view_for(x):
    if x.layout == "C":
        return lambda x: x.reshape(x.size)
    return lambda x: x.T.reshape(x.size)
