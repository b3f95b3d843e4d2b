"""Attention, `softmax(q @ k^T * scale, masked) @ v` per (batch, head) slice, as one call
compiled once per installation: an f32 attention group of rank 4 whose score chain is a
scale (a product or a quotient by a constant), then a boolean or additive mask, then
the causal mask, each optional (`scaled_dot_product_attention`, or the same written out)
*is* `attention_post`, so lowering generates and Numba compiles nothing for it. A
generated attention kernel took 4.2-4.6 s to compile: most of a transformer's cold
compile. Any other chain is generated (`templates.attention`), with the same loops.

    attention_post(q [B, H, L, D], k [B, H, S, D] (rows) or [B, H, D, S], v [B, H, S, Dv],
                   mask [Bm, Hm, Lm, S] (Bm in (1, B), Hm in (1, H), Lm in (1, L); empty
                   for none), mode int64[9], scale [1], tiles [threads, L, S],
                   keys [threads, D, S] (unless k is in rows: [1, 0, 0]), threads, out)

`mode` is [k in rows, divide by the scale (else multiply), the mask's kind (0 none, 1
boolean: True takes part, 2 added), causal, parallel, heads inside, and where q's, k's
and v's heads start]. Slices are split between threads when `parallel`; each slice's
scores stay in its thread's tile. The products are the f32 register tile's
(`sgemm.block_at`) on slices addressed by offset and row stride, so that q, k (in rows),
v and out may hold their heads inside, as a linear layer writes them (`heads inside`
bits 1, 2, 4, 8): [B, L, G, D], the heads of q, k or v being the H of those G that start
at its column (a fused qkv projection's output: G = 3H, columns 0, H*D, 2H*D), the
output's exactly [B, L, H, Dv]. The head split and merge of multi-head attention
(`view(B, L, H, D).transpose(1, 2)` and back, a slice first) are then read and written in
place instead of copied (`templates.heads`).
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
def _at(x, inner, start, b, heads, rows):
    """(offset, row stride) of slice b (= batch * heads + head) of x, a flat [B, H, rows,
    D] array, or (`inner`: heads read in place) a [B, rows, G, D] one whose heads start
    at column `start` of each row of G * D."""
    d = x.shape[3]
    if inner:
        width = x.shape[2] * d
        return (b // heads) * rows * width + start + (b % heads) * d, width
    return b * rows * d, d


@njit(nogil=True)
def _slice(q, k, v, mask, mode, scale, s, kt, out, b, dims):
    """Slice b (= batch * heads + head) of q, k, v into out; `dims` = (heads, L, S, D,
    Dv); `mode[5]` says which of q, k, v, out hold their heads inside (bits 1, 2, 4, 8),
    mode[6:9] where q's, k's and v's heads start."""
    heads, ql, sl, d, dv = dims
    qf, kf, vf, of = q.reshape(q.size), k.reshape(k.size), v.reshape(v.size), out.reshape(
        out.size)
    lay, none = mode[5], no_epilogue()
    q0, lq = _at(q, lay & 1, mode[6], b, heads, ql)
    sf = s.reshape(s.size)
    if mode[0]:  # keys in rows: the tile reads its right operand's rows, so k^T first
        k0, lk = _at(k, lay & 2, mode[7], b, heads, sl)
        for jj in range(sl):
            for dd in range(d):
                kt[dd, jj] = kf[k0 + jj * lk + dd]
        block_at(qf, q0, lq, kt.reshape(kt.size), 0, sl, 1, sf, 0, sl, d, 0, ql, 0, sl, none)
    else:
        block_at(qf, q0, lq, kf, b * d * sl, sl, 1, sf, 0, sl, d, 0, ql, 0, sl, none)
    mb = b // heads if mask.shape[0] > 1 else 0
    mh = b % heads if mask.shape[1] > 1 else 0
    _rows(s, scale, mode, mask[mb, mh] if mode[2] else mask[0, 0])
    v0, lv = _at(v, lay & 4, mode[8], b, heads, sl)
    o0, lo = _at(out, lay & 8, 0, b, heads, ql)
    block_at(sf, 0, sl, vf, v0, lv, 1, of, o0, lo, sl, 0, ql, 0, dv, none)


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
    lay = mode[5]
    heads = out.shape[2 if lay & 8 else 1]
    ql, sl, nbh = q.shape[2 - (lay & 1)], v.shape[1 if lay & 4 else 2], q.shape[0] * heads
    dims = (heads, ql, sl, q.shape[3], v.shape[3])
    if mode[2] == 0:
        mask = mask.reshape((1, 1, 1, mask.size))
    parts = min(threads, nbh, tiles.shape[0]) if mode[4] else 1
    if parts > 1:
        _split(q, k, v, mask, mode, scale[0], tiles, keys, out, dims, nbh, parts)
    else:
        for b in range(nbh):
            _slice(q, k, v, mask, mode, scale[0], tiles[0], keys[0], out, b, dims)
