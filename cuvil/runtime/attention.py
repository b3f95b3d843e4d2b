"""Attention, `softmax(q @ k^T * scale, masked) @ v` per (batch, head) slice, as one call
compiled once per installation: an f32 attention group of rank 4 whose score chain is a
scale (a product or a quotient by a constant), then a boolean or additive mask, then
the causal mask, each optional (`scaled_dot_product_attention`, or the same written out)
*is* `attention_post`, so lowering generates and Numba compiles nothing for it. A
generated attention kernel took 4.2-4.6 s to compile: most of a transformer's cold
compile. Any other chain is generated (`templates.attention`), with the same loops.

    attention_post(q [B, H, L, D], k [B, H, S, D] (rows) or [B, H, D, S], v [B, H, S, Dv],
                   mask [Bm, Hm, Lm, S] (Bm in (1, B), Hm in (1, H), Lm in (1, L); empty
                   for none), mode int64[6], scale [1], tiles [threads, L, S],
                   keys [threads, D, S] (unless k is in rows: [1, 0, 0]), threads, out)

`mode` is [k in rows, divide by the scale (else multiply), the mask's kind (0 none, 1
boolean: True takes part, 2 added), causal, parallel, heads inside]. Slices are split
between threads when `parallel`; each slice's scores stay in its thread's tile. The
products are the f32 register tile's (`sgemm.block_at`) on slices addressed by offset
and row stride, so that q, k (in rows), v and out may hold their heads inside, [B, L, H,
D] as a linear layer writes them (`heads inside` bits 1, 2, 4, 8): the head split and
merge of multi-head attention (`view(B, L, H, D).transpose(1, 2)` and back) are then
read and written in place instead of copied (`templates.attention.heads_in_place`).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from cuvil.runtime.f32_tile import no_epilogue
from cuvil.runtime.numba_cache import njit
from cuvil.runtime.sgemm import block_at
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


@njit(nogil=True, inline="always")
def _at(inner, b, heads, rows, width):
    """(offset, row stride) of slice b (= batch * heads + head) of a flat [B, H, rows,
    width] array, or of a [B, rows, H, width] one (`inner`: heads read in place)."""
    if inner:
        return ((b // heads) * rows * heads + b % heads) * width, heads * width
    return b * rows * width, width


@njit(nogil=True)
def _slice(q, k, v, mask, mode, scale, s, kt, out, b, dims):
    """Slice b (= batch * heads + head) of flat q, k, v into flat out; `dims` = (heads,
    L, S, D, Dv), `mode[5]` says which of q, k, v, out hold their heads inside (bits 1, 2,
    4, 8)."""
    heads, ql, sl, d, dv = dims
    lay, none = mode[5], no_epilogue()
    q0, lq = _at(lay & 1, b, heads, ql, d)
    sf = s.reshape(s.size)
    if mode[0]:  # keys in rows: the tile reads its right operand's rows, so k^T first
        k0, lk = _at(lay & 2, b, heads, sl, d)
        for jj in range(sl):
            for dd in range(d):
                kt[dd, jj] = k[k0 + jj * lk + dd]
        block_at(q, q0, lq, kt.reshape(kt.size), 0, sl, 1, sf, 0, sl, d, 0, ql, 0, sl, none)
    else:
        block_at(q, q0, lq, k, b * d * sl, sl, 1, sf, 0, sl, d, 0, ql, 0, sl, none)
    mb = b // heads if mask.shape[0] > 1 else 0
    mh = b % heads if mask.shape[1] > 1 else 0
    _rows(s, scale, mode, mask[mb, mh] if mode[2] else mask[0, 0])
    v0, lv = _at(lay & 4, b, heads, sl, dv)
    o0, lo = _at(lay & 8, b, heads, ql, dv)
    block_at(sf, 0, sl, v, v0, lv, 1, out, o0, lo, sl, 0, ql, 0, dv, none)


@njit(nogil=True, parallel=True)
def _split(q, k, v, mask, mode, scale, tiles, keys, out, dims, nbh, parts):
    step = (nbh + parts - 1) // parts
    for t in prange(parts):
        kt = keys[0] if keys.shape[0] == 1 else keys[t]
        for b in range(t * step, min(nbh, (t + 1) * step)):
            _slice(q, k, v, mask, mode, scale, tiles[t], kt, out, b, dims)


@njit(nogil=True)
def attention_post(q, k, v, mask, mode, scale, tiles, keys, threads, out):
    """out = softmax(scores(q, k)) @ v; see the module docstring."""
    inner = mode[5] & 1
    nb, ql, d = q.shape[0], q.shape[2 - inner], q.shape[3]
    heads = q.shape[1 + inner]
    sl, dv = v.shape[1 if mode[5] & 4 else 2], v.shape[3]
    nbh, dims = nb * heads, (heads, ql, sl, d, dv)
    qf, kf, vf, of = q.reshape(q.size), k.reshape(k.size), v.reshape(v.size), out.reshape(
        out.size)
    if mode[2] == 0:
        mask = mask.reshape((1, 1, 1, mask.size))
    parts = min(threads, nbh, tiles.shape[0]) if mode[4] else 1
    if parts > 1:
        _split(qf, kf, vf, mask, mode, scale[0], tiles, keys, of, dims, nbh, parts)
    else:
        for b in range(nbh):
            _slice(qf, kf, vf, mask, mode, scale[0], tiles[0], keys[0], of, b, dims)
