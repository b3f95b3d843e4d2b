"""Two linear layers with a ReLU between them as one call (the `mlp_relu` ops of
`rules/fusion/mlp.cvr`): `out = clip2(relu(x @ w1 + b1) @ w2 + b2 + res)`, both weights
f32 constants packed into column panels (`templates.gemm.panels`); `mlp_head_post` adds an
output layer after the pair.

At up to `FUSED_ROWS` rows (batch-1 inference) each thread computes its own column panels
of the hidden layer and at once those columns' share of the second product: the second
product is split along its inner dim, one partial sum per thread; after the region the
partial sums are added and the second epilogue applied (`gemm_post.rows_epilogue`). The
pair then takes one parallel region instead of two, and each thread reads the hidden
values it wrote itself: 784 ->
512 -> 512 at one row on two threads took 17.2 us against 21.0 for the two products, and
8 rows 29.4 against 32.3. From 16 rows on the row tiles of each product are as fast or
faster, so past FUSED_ROWS the two products run as `gemm_post.linear_post` runs them,
through the planned `hidden` buffer.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from cuvil.runtime.numba_cache import njit
from cuvil.targets.cpu.kernels.f32_tile import MR, no_epilogue
from cuvil.targets.cpu.kernels.gemm_post import linear_post, rows_epilogue, tile_epilogue
from cuvil.targets.cpu.kernels.sgemm import WIDTH, block_at

FUSED_ROWS = MR  # rows up to which the pair shares one region: one row tile


@njit(nogil=True, parallel=True, link=False)
def _pair(a, p1, epi1, h, p2, partial, parts):
    """h[:, cols] = epi1(a @ w1[:, cols]) for each thread's column panels `cols`, and
    partial[t] = h[:, cols] @ w2[cols, :] (w1, w2 as panels p1, p2)."""
    m, kd = a.shape
    n1, n2 = h.shape[1], partial.shape[2]
    af, hf, pf = a.reshape(a.size), h.reshape(h.size), partial.reshape(partial.size)
    p1f, p2f = p1.reshape(p1.size), p2.reshape(p2.size)
    step = ((n1 + WIDTH - 1) // WIDTH + parts - 1) // parts * WIDTH
    for t in prange(parts):
        lo, hi = min(n1, t * step), min(n1, (t + 1) * step)
        block_at(af, 0, kd, p1f, 0, WIDTH, kd, hf, 0, n1, kd, 0, m, lo, hi, epi1)
        block_at(hf, lo, n1, p2f, lo * WIDTH, WIDTH, n1, pf, t * m * n2, n2, hi - lo, 0, m,
                 0, n2, no_epilogue())


@njit(nogil=True)
def _sum_parts(partial, o):
    """o = the sum of partial[t] over t."""
    o[:] = partial[0]
    for t in range(1, partial.shape[0]):
        o += partial[t]


@njit(nogil=True, link=False)
def mlp_post(x, w1, p1, bias1, clip1, w2, p2, bias2, res2, clip2, mode, parts, hidden, out):
    """out [..., N2] = clip2(hidden @ w2 + bias2 + res2), hidden [..., N1] = clip1(x @ w1 +
    bias1), x [..., K]; `p1`, `p2` the weights' panels; `mode` = `linear_post`'s (no GELU)
    and then FUSED_ROWS; `res2` shaped like `out` or empty."""
    kd, n1, n2 = x.shape[-1], hidden.shape[-1], out.shape[-1]
    rows = 1
    for d in x.shape[:-1]:
        rows *= d
    if parts > 1 and rows <= mode[3]:
        partial = np.empty((parts, rows, n2), np.float32)
        epi1 = tile_epilogue(bias1, np.empty(0, np.float32), clip1, 0)
        _pair(x.reshape((rows, kd)), p1, epi1, hidden.reshape((rows, n1)), p2, partial, parts)
        o = out.reshape((rows, n2))
        _sum_parts(partial, o)
        rows_epilogue(o, bias2, res2.reshape((rows if res2.size else 0, n2)), clip2, 0, 0,
                      rows)
        return
    linear_post(x, w1, p1, bias1, np.empty(0, np.float32), clip1, mode, parts, hidden)
    linear_post(hidden, w2, p2, bias2, res2, clip2, mode, parts, out)


@njit(nogil=True)
def mlp_head_post(x, w1, p1, bias1, clip1, w2, p2, bias2, clip2, w3, p3, bias3, res3, clip3,
                  mode, parts, hidden, hidden2, out):
    """out = clip3(hidden2 @ w3 + bias3 + res3), hidden2 = clip2(hidden @ w2 + bias2),
    hidden = clip1(x @ w1 + bias1): the pair (`mlp_post`) and an output layer in one call,
    `p3` packed as `linear_post` takes it (at one row a classifier's 512 x 10 then costs
    no call of its own: 0.7 us less here)."""
    no_res = np.empty((0, hidden2.shape[-1]), np.float32)
    mlp_post(x, w1, p1, bias1, clip1, w2, p2, bias2, no_res, clip2, mode, parts, hidden,
             hidden2)
    linear_post(hidden2, w3, p3, bias3, res3, clip3, mode, parts, out)
