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
place instead of copied (`templates.heads`). A causal or masked slice whose first rows do
not see every key goes by blocks of rows, each taking the keys up to the last one its rows
see: GPT-2's attention, its causal mask a boolean constant, 548 -> 468 us (two threads,
one process), `is_causal` on [8, 4, 64, 32] 297 -> 242 us; a mask that hides nothing
keeps the one block (`_slice`).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from cuvil.runtime.numba_cache import njit
from cuvil.targets.cpu.kernels.f32_tile import MR, no_epilogue
from cuvil.targets.cpu.kernels.sgemm import block_at
from cuvil.targets.cpu.kernels.vmath import vexp, vmasked, vmax

_ROWS = {"nsz", "arcp", "contract", "afn", "reassoc"}  # no nnan/ninf: NaN as torch, -inf masks
BLOCK = 2 * MR  # rows per block of masked attention (two row tiles; 8 left HF GPT-2 (D = 32)
#                 where it was: the blocks' calls ate what they skipped)


@njit(nogil=True, fastmath=_ROWS, error_model="numpy")
def _rows(s, scale, mode, mm, r0, r1, n):
    """Rows r0..r1 of tile s [L, S], their first n scores, scaled, masked (row i of mm [1
    or L, S]) and softmaxed, in place; a row of -inf scores weighs every key 0 (torch's
    `_safe_softmax`). One function for the whole block: a call per row cost 100 ns (its
    array's reference counts), as long as the row's arithmetic."""
    neg = s.dtype.type(-np.inf)
    for i in range(r0, r1):  # a whole row as itself: its slice's loops were 3-8% slower
        row, mrow = s[i] if n == s.shape[1] else s[i, :n], mm[i if mm.shape[0] > 1 else 0]
        if mode[1]:
            for j in range(row.shape[0]):
                row[j] = row[j] / scale
        else:
            for j in range(row.shape[0]):
                row[j] = row[j] * scale
        if mode[2] == 1:  # -inf added where masked, as torch: NaN at a NaN or +inf score
            for j in range(row.shape[0]):
                row[j] = row[j] if mrow[j] else row[j] + neg
        elif mode[2] == 2:
            for j in range(row.shape[0]):
                row[j] = row[j] + mrow[j]
        if mode[3]:
            for j in range(i + 1, row.shape[0]):
                row[j] = row[j] + neg
        m = vmax(row)
        if vmasked(row, m):  # every score -inf: weights 0, as torch's math backend
            row[:] = 0
            continue
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
def _slice(q, k, v, mask, last, mode, scale, s, kt, out, b, dims):
    """Slice b (= batch * heads + head) of q, k, v into out; `dims` = (heads, L, S, D,
    Dv); `mode[5]` says which of q, k, v, out hold their heads inside (bits 1, 2, 4, 8),
    mode[6:9] where q's, k's and v's heads start. Causal attention, and masked attention
    whose first rows do not see every key, goes by blocks of BLOCK rows, each taking
    only the keys up to the last one a row of it sees (`_seen`): most of the masked half
    of causal scores is neither computed, exponentiated nor multiplied by v."""
    heads, ql, sl, d, dv = dims
    qf, vf, of, sf = q.reshape(q.size), v.reshape(v.size), out.reshape(out.size), s.reshape(
        s.size)
    lay, none = mode[5], no_epilogue()
    q0, lq = _at(q, lay & 1, mode[6], b, heads, ql)
    kf, k0 = _keys(k, kt, mode, b, heads, min(sl, ql) if mode[3] else sl, dims)
    mb = b // heads if mask.shape[0] > 1 else 0
    mh = b % heads if mask.shape[1] > 1 else 0
    mm = mask[mb, mh] if mode[2] else mask[0, 0]
    v0, lv = _at(v, lay & 4, mode[8], b, heads, sl)
    o0, lo = _at(out, lay & 8, 0, b, heads, ql)
    step = max(ql, 1)  # by blocks where the first one's rows do not see every key
    if mode[3] or (mode[2] and _seen(mode, last, mb, mh, 0, min(ql, BLOCK), sl) < sl):
        step = BLOCK
    bad = _bad_keys(q, k, mode, b, heads, vf, v0, lv, dims, mode[2] != 0 or mode[3] != 0)
    for r0 in range(0, ql, step):
        r1 = min(ql, r0 + step)
        n = _seen(mode, last, mb, mh, r0, r1, sl)
        block_at(qf, q0, lq, kf, k0, sl, 1, sf, 0, sl, d, r0, r1, 0, n, none)
        _rows(s, scale, mode, mm, r0, r1, n)
        block_at(sf, 0, sl, vf, v0, lv, 1, of, o0, lo, n, r0, r1, 0, dv, none)
        if n < sl:
            _unseen(q, k, mode, scale, b, heads, vf, v0, lv, dims, bad, n, of, o0, lo, r0, r1)


@njit(nogil=True, inline="always")
def _nonfinite(xf, x0, step, count):
    """Whether any of `count` elements of xf from x0 `step` apart is NaN or infinite: their
    sum times 0, NaN exactly then (vectorized; no branch per element)."""
    z = np.float32(0)
    for c in range(count):
        z += xf[x0 + c * step] * np.float32(0)
    return z != z


@njit(nogil=True, inline="always")
def _key_at(k, mode, b, heads, dims):
    """(flat k, offset of slice b's key 0, stride between keys, stride within a key)."""
    sl, d = dims[2], dims[3]
    kf = k.reshape(k.size)
    if not mode[0]:  # k given as [B, H, D, S]
        return kf, b * d * sl, 1, sl
    k0, lk = _at(k, mode[5] & 2, mode[7], b, heads, sl)
    return kf, k0, lk, 1


@njit(nogil=True, inline="always")
def _last_bad(xf, x0, rows, row_step, count, step):
    """One past the last of `rows` rows (`row_step` apart, each `count` elements `step`
    apart) that holds a NaN or an infinity; 0 for none. A branch-free pass first: the rows
    are searched only when it finds one."""
    z = np.float32(0)
    if step == 1 and row_step == count:  # one run of memory; unsigned indices vectorize
        for c in range(rows * count):
            z += xf[np.uintp(x0 + c)] * np.float32(0)
    else:
        for j in range(rows):
            for c in range(count):
                z += xf[np.uintp(x0 + j * row_step + c * step)] * np.float32(0)
    if z == z:
        return 0
    for j in range(rows - 1, -1, -1):
        if _nonfinite(xf, x0 + j * row_step, step, count):
            return j + 1
    return 0


@njit(nogil=True, fastmath=_ROWS)
def _bad_keys(q, k, mode, b, heads, vf, v0, lv, dims, skips):
    """(one past the last key whose row of k, one past the last whose row of v, holds a
    NaN or an infinity; whether a row of q does), or (0, 0, False) when no key is skipped
    (`skips` false): what `_unseen` needs, from one pass over the slice."""
    if not skips:
        return 0, 0, False
    heads_, ql, sl, d, dv = dims
    kf, k0, lk, kc = _key_at(k, mode, b, heads, dims)
    q0, lq = _at(q, mode[5] & 1, mode[6], b, heads, ql)
    return (_last_bad(kf, k0, sl, lk, d, kc), _last_bad(vf, v0, sl, lv, dv, 1),
            _last_bad(q.reshape(q.size), q0, ql, lq, d, 1) > 0)


@njit(nogil=True, fastmath=_ROWS)
def _unseen(q, k, mode, scale, b, heads, vf, v0, lv, dims, bad, n, of, o0, lo, r0, r1):
    """Rows r0..r1 of the output as torch's `softmax(scores + mask) @ v` has them, where
    they skipped keys n onwards (all masked for them, -inf added): a skipped score that is
    NaN or +inf makes the row NaN (NaN + -inf), and a NaN or an infinity in a skipped
    key's row of v its column (times the weight 0). Computed only where k, q or v hold
    one (`bad`, from `_bad_keys`)."""
    kbad, vbad, qbad = bad
    heads_, ql, sl, d, dv = dims
    if vbad > n:
        for c in range(dv):
            if _nonfinite(vf, v0 + n * lv + c, lv, sl - n):
                for r in range(r0, r1):
                    of[o0 + r * lo + c] = np.nan
    if kbad <= n and not qbad:
        return
    kf, k0, lk, kc = _key_at(k, mode, b, heads, dims)
    qf = q.reshape(q.size)
    q0, lq = _at(q, mode[5] & 1, mode[6], b, heads, ql)
    for r in range(r0, r1):
        for j in range(n, sl):
            t = np.float32(0)
            for c in range(d):
                t += qf[q0 + r * lq + c] * kf[k0 + j * lk + c * kc]
            t = t / scale if mode[1] else t * scale
            if t != t or t == np.inf:
                for c in range(dv):
                    of[o0 + r * lo + c] = np.nan
                break


@njit(nogil=True, inline="always")
def _seen(mode, last, mb, mh, r0, r1, sl):
    """How many keys rows r0..r1 take: past the last key one of them sees, every score is
    masked (-inf, so 0 after the softmax). The causal mask sees keys up to the row, a
    mask those up to `last[mb, mh, row]` (`_last_seen`)."""
    n = min(sl, r1) if mode[3] else sl
    if mode[2] == 0:
        return n
    seen = 1
    for i in range(r0, r1):
        seen = max(seen, last[mb, mh, i if last.shape[2] > 1 else 0])
    return min(n, seen)


@njit(nogil=True)
def _last_seen(mask, kind):
    """For each row of mask [Bm, Hm, Lm, S], one past the last key it sees (boolean: True,
    added: not -inf); at least one, so that a row that sees none is computed as torch's: 0
    weights where its scores are -inf, NaN where one is NaN or +inf (NaN + -inf)."""
    bm, hm, lm, sl = mask.shape
    last = np.ones((bm, hm, lm), np.int64)
    for a in range(bm if kind else 0):
        for h in range(hm):
            for i in range(lm):  # elements, not row views: a view's count is 20-40 ns
                j = sl - 1
                while j >= 1 and (not mask[a, h, i, j] if kind == 1 else
                                  mask[a, h, i, j] == -np.inf):
                    j -= 1
                last[a, h, i] = j + 1
    return last


@njit(nogil=True, inline="always")
def _keys(k, kt, mode, b, heads, used, dims):
    """(flat k^T [D, S], the offset of slice b's) for the score product: k itself when it
    is given transposed, else its first `used` rows copied into kt (the tile reads its
    right operand by rows)."""
    sl, d = dims[2], dims[3]
    kf = k.reshape(k.size)
    if not mode[0]:
        return kf, b * d * sl
    k0, lk = _at(k, mode[5] & 2, mode[7], b, heads, sl)
    for jj in range(used):
        for dd in range(d):
            kt[dd, jj] = kf[k0 + jj * lk + dd]
    return kt.reshape(kt.size), 0


@njit(nogil=True, parallel=True, link=False)
def _split(q, k, v, mask, last, mode, scale, tiles, keys, out, dims, nbh, parts):
    step = (nbh + parts - 1) // parts
    for t in prange(parts):
        kt = keys[0] if keys.shape[0] == 1 else keys[t]
        for b in range(t * step, min(nbh, (t + 1) * step)):
            _slice(q, k, v, mask, last, mode, scale, tiles[t], kt, out, b, dims)


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
    last = _last_seen(mask, mode[2])
    if parts > 1:
        _split(q, k, v, mask, last, mode, scale[0], tiles, keys, out, dims, nbh, parts)
    else:
        for b in range(nbh):
            _slice(q, k, v, mask, last, mode, scale[0], tiles[0], keys[0], out, b, dims)
