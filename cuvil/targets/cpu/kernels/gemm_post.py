"""Products ending in the common epilogue, `out = clip(gelu?(x @ w + bias) + res)`, as one
call compiled once per installation: a GEMM group with that epilogue (the stock `linear`,
`linear_relu`, `linear_gelu`, `linear_residual` ops, or none) *is* `linear_post`, so
lowering generates and Numba compiles nothing for it.

`x` [..., K] is one product over all its rows with `w` [K, N]. `packed` is what lowering
prepared of a constant weight (`blas.gemm_weight_post`): `bias` [N] (empty for none),
`res` (shaped like `out`, or empty), `clip` [lo, hi], and `mode` [GELU or not, the most
rows that take `gemv`, the output size from which rows are split between threads], the
policy lowering decides (`templates.gemm`). Where Cuvil's tile computes the product (f32
panels, `blas.gemm_packed`) and there is no GELU, the epilogue is applied in the tile's
stores while the sums are in registers: 197x192 @ 192x768 + bias + residual + ReLU on two
threads took 429 us so, against 482 with a second pass (the product alone: 421).
Otherwise it runs over rows of the output after the product, as a generated one does.
GELU is 0 for none, 1 for the exact (erf) form, 2 for the tanh form (GPT-2's
`approximate="tanh"`).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from cuvil.runtime.numba_cache import njit
from cuvil.targets.cpu.kernels.blas import gemm_weight_post
from cuvil.targets.cpu.kernels.vmath import verf, vtanh

CLIP_FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}  # no nnan/ninf: clip bounds are inf


@njit(nogil=True, fastmath=CLIP_FASTMATH, error_model="numpy", link=False)
def rows_epilogue(o, bias, r, clip, gelu, r0, r1):
    """Rows r0..r1 of o [M, N] := clip(gelu?(o + bias) + r), in one pass over each row
    but with GELU (each loop indexed from 0, so that Numba's wraparound check does not
    keep it scalar). `gelu`: 0 none, 1 erf, 2 tanh (the generated code's expressions)."""
    lo, hi = clip[0], clip[1]
    half, one, s = o.dtype.type(0.5), o.dtype.type(1.0), o.dtype.type(0.7071067811865476)
    c0, c1 = o.dtype.type(0.7978845608028654), o.dtype.type(0.044715)
    live = bias.size or gelu or r.shape[0] or lo != -np.inf or hi != np.inf
    for i in range(r0 if live else r1, r1):
        row, add = o[i], r[i] if r.shape[0] else o[i]
        if gelu == 1:
            for j in range(row.shape[0]):
                v = row[j] + bias[j] if bias.size else row[j]
                row[j] = half * v * (one + o.dtype.type(verf(v * s)))
        elif gelu == 2:
            for j in range(row.shape[0]):
                v = row[j] + bias[j] if bias.size else row[j]
                row[j] = half * v * (one + o.dtype.type(vtanh(c0 * (v + c1 * v * v * v))))
        if bias.size and not gelu and r.shape[0]:
            for j in range(row.shape[0]):
                row[j] = min(max(row[j] + bias[j] + add[j], lo), hi)
        elif bias.size and not gelu:
            for j in range(row.shape[0]):
                row[j] = min(max(row[j] + bias[j], lo), hi)
        elif r.shape[0]:
            for j in range(row.shape[0]):
                row[j] = min(max(row[j] + add[j], lo), hi)
        elif lo != -np.inf or hi != np.inf:
            for j in range(row.shape[0]):
                row[j] = min(max(row[j], lo), hi)


@njit(nogil=True, parallel=True, link=False)
def _post_split(o, bias, r, clip, gelu, parts):
    rows = o.shape[0]
    step = (rows + parts - 1) // parts
    for t in prange(parts):
        rows_epilogue(o, bias, r, clip, gelu, min(rows, t * step), min(rows, (t + 1) * step))


@njit(nogil=True, inline="always")
def tile_epilogue(bias, res, clip, gelu):
    """What the tile applies in its stores (`blas.gemm_weight_post`): the whole epilogue,
    or nothing where GELU comes first."""
    inf, rf = clip.dtype.type(np.inf), res.reshape(res.size)
    if gelu:
        return bias, rf, -inf, inf, 0
    return bias, rf, clip[0], clip[1], (1 if bias.size else 0) + (2 if res.size else 0)


@njit(nogil=True, link=False)
def linear_post(x, w, packed, bias, res, clip, mode, parts, out):
    """out [..., N] = the epilogue of x [..., K] @ w [K, N]: in the tile's stores where the
    tile computes the product and there is no GELU, else over rows after it."""
    kd, nd = x.shape[-1], out.shape[-1]
    rows = 1
    for d in x.shape[:-1]:
        rows *= d
    a, o = x.reshape((rows, kd)), out.reshape((rows, nd))
    epi = tile_epilogue(bias, res, clip, mode[0])
    if gemm_weight_post(a, w, packed, o, parts, mode[1], epi) and not mode[0]:
        return
    r = res.reshape((res.size // nd if nd else 0, nd))
    if parts > 1 and out.size >= mode[2]:
        _post_split(o, bias, r, clip, mode[0], parts)
    else:
        rows_epilogue(o, bias, r, clip, mode[0], 0, rows)
