"""Attention, `softmax(q @ k^T * scale, masked) @ v` per (batch, head) slice, as one call
compiled once per installation: an f32 attention group of rank 4 whose score chain is a
scale (a product or a quotient by a constant), then a boolean or additive mask, then
the causal mask, each optional (`scaled_dot_product_attention`, or the same written out)
*is* `attention_post`, so lowering generates and Numba compiles nothing for it. A
generated attention kernel took 4.2-4.6 s to compile: most of a transformer's cold
compile. Any other chain is generated (`templates.attention`), with the same loops.

    attention_post(q [B, H, L, D], k [B, H, S, D] (rows) or [B, H, D, S], v [B, H, S, Dv],
                   mask [Bm, Hm, Lm, S] (Bm in (1, B), Hm in (1, H), Lm in (1, L); empty
                   for none), mode int64[5], scale [1], tiles [threads, L, S],
                   keys [threads, D, S] (unless k is in rows: [1, 0, 0]), threads, out)

`mode` is [k in rows, divide by the scale (else multiply), the mask's kind (0 none, 1
boolean: True takes part, 2 added), causal, parallel]. Slices are split between threads
when `parallel`; each slice's scores stay in its thread's tile.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from cuvil.runtime.blas import gemm
from cuvil.runtime.numba_cache import njit
from cuvil.runtime.vmath import vexp, vmax

_ROWS = {"nsz", "arcp", "contract", "afn", "reassoc", "nnan"}  # no ninf: -inf masks


@njit(nogil=True, fastmath=_ROWS, error_model="numpy")
def _rows(s, scale, mode, mm):
    """Each score row of tile s [L, S] scaled, masked (row i of mm [1 or L, S]) and
    softmaxed, in place. One function for the whole tile: a call per row cost 100 ns (its
    array's reference counts), as long as the row's arithmetic."""
    neg = s.dtype.type(-np.inf)
    for i in range(s.shape[0]):
        row, mrow = s[i], mm[i if mm.shape[0] > 1 else 0]
        if mode[1]:
            for j in range(row.shape[0]):
                row[j] = row[j] / scale
        else:
            for j in range(row.shape[0]):
                row[j] = row[j] * scale
        if mode[2] == 1:
            for j in range(row.shape[0]):
                row[j] = row[j] if mrow[j] else neg
        elif mode[2] == 2:
            for j in range(row.shape[0]):
                row[j] = row[j] + mrow[j]
        if mode[3]:
            for j in range(i + 1, row.shape[0]):
                row[j] = neg
        m = vmax(row)
        tot = row.dtype.type(0)
        for j in range(row.shape[0]):
            e = np.float32(vexp(row[j] - m))
            row[j] = e
            tot += e
        inv = row.dtype.type(1) / tot
        for j in range(row.shape[0]):
            row[j] *= inv


@njit(nogil=True)
def _slice(q, k, v, mask, mode, scale, s, kt, out, b, heads):
    """Slice b (= batch * heads + head) of q, k, v [slices, ...] into out [slices, L, Dv]."""
    if mode[0]:  # keys in rows: the tile reads its right operand's rows, so k^T first
        kb = k[b]
        for jj in range(kb.shape[0]):
            for dd in range(kb.shape[1]):
                kt[dd, jj] = kb[jj, dd]
        gemm(q[b], kt, s, 1)
    else:
        gemm(q[b], k[b], s, 1)
    mb = b // heads if mask.shape[0] > 1 else 0
    mh = b % heads if mask.shape[1] > 1 else 0
    _rows(s, scale, mode, mask[mb, mh] if mode[2] else mask[0, 0])
    gemm(s, v[b], out[b], 1)


@njit(nogil=True, parallel=True)
def _split(q, k, v, mask, mode, scale, tiles, keys, out, heads, parts):
    nbh = q.shape[0]
    step = (nbh + parts - 1) // parts
    for t in prange(parts):
        kt = keys[0] if keys.shape[0] == 1 else keys[t]
        for b in range(t * step, min(nbh, (t + 1) * step)):
            _slice(q, k, v, mask, mode, scale, tiles[t], kt, out, b, heads)


@njit(nogil=True)
def attention_post(q, k, v, mask, mode, scale, tiles, keys, threads, out):
    """out = softmax(scores(q, k)) @ v; see the module docstring."""
    nb, heads, ql, d = q.shape
    sl, dv = v.shape[2], v.shape[3]
    nbh = nb * heads
    q3, v3, o3 = q.reshape((nbh, ql, d)), v.reshape((nbh, sl, dv)), out.reshape((nbh, ql, dv))
    k3 = k.reshape((nbh, sl, d)) if mode[0] else k.reshape((nbh, d, sl))
    if mode[2] == 0:
        mask = mask.reshape((1, 1, 1, mask.size))
    parts = min(threads, nbh, tiles.shape[0]) if mode[4] else 1
    if parts > 1:
        _split(q3, k3, v3, mask, mode, scale[0], tiles, keys, o3, heads, parts)
    else:
        for b in range(nbh):
            _slice(q3, k3, v3, mask, mode, scale[0], tiles[0], keys[0], o3, b, heads)
