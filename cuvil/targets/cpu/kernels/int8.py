"""Quantized GEMM and convolution kernels: u8 activations x s8 weights, int32 sums, and a
fused epilogue (dequantize, bias, ReLU; or requantize to u8/s8 for the next int8 op).
`cuvil.targets.cpu.kernels.quantized` packs weights and calls these from Python; generated code (the
`qgemm`/`qconv` templates) calls `qgemm_layer` / `qconv_layer` directly, like `blas.gemm`.

    y[m, n] = x_scale * w_scale[n] * sum_k (xq[m, k] - x_zero) * wq[k, n] + bias[n]

The inner product is `vpdpbusd` (AVX-512 VNNI, or AVX-VNNI on 256-bit vectors): four
u8 x s8 products summed into each int32 lane. LLVM 22 (Numba 0.68) never emits it from
Numba loops: a K-reduction becomes `vpdpwssd` on int16 pairs, an outer product
`vpmaddwd`, 13-19 GOP/s on one core. So the micro-kernel is written in LLVM IR
(`tile_kernel`): MR=6 rows x 64 columns in 24 zmm accumulators, one broadcast of four
activation bytes and four weight loads per step of 4 along K: 540-580 GOP/s on one core
alone, ~500 with the epilogue (256x1024x1024; torch's fp32 GEMM ~85 GFLOP/s, fbgemm's
int8 ~370). A CPU without VNNI gets the same tile in plain vector IR (zext/sext, mul,
adds; correct, ~19 GOP/s), which the cost model's measurements will then rule out.

Weights are packed once (`pack_weight`, at compile time) into panels of 64 columns (the
last one 16, 32 or 48), each [K/4, columns, 4] bytes, K padded with zeros to a multiple of 4;
`colsum[n] = sum_k wq[k, n]` turns the zero point into one product per column, the
accumulators' start: sum (x - zx) w = sum x w - zx * colsum. Activations are u8 with a zero
point; s8 ones are shifted by 128 into u8 (zero point + 128). Rows need K padded to a
multiple of 4 (`qgemm` copies when it is not), any row stride.

Threads as in `blas`: `parts` threads take row blocks of MR rows, or, with fewer row
blocks than threads (M=1), blocks of panels. Convolution (`qconv2d_into`, NCHW) is, per
image, a transpose to HWC, im2col (channel runs, padding with the zero point), the same
GEMM and a transpose back; images split between threads.

The micro-kernel is `kernels.int8_tile`. Numba's cache checks only a function's own
file, so Cuvil keys its drivers' caches on the whole runtime's source
(`numba_cache.runtime_hash`): a change to the tile recompiles the drivers that inline it.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from cuvil.lower.qlayer import MAX_K  # noqa: F401 (one definition: lowering checks it too)
from cuvil.runtime.numba_cache import njit
from cuvil.targets.cpu.kernels.conv import im2col_nhwc
from cuvil.targets.cpu.kernels.int8_tile import LANES, NARROW, PANEL, tile_kernel

MR = 6  # rows per tile
QGEMM_PAR_WORK = 1 << 21  # multiply-adds below which one thread is faster


_M1, _M2, _M3, _M4 = (tile_kernel(MR, nv) for nv in (1, 2, 3, 4))  # nv vectors wide
_S1, _S2, _S3, _S4 = (tile_kernel(1, nv) for nv in (1, 2, 3, 4))  # one row


@njit(nogil=True, inline="always")
def _panel(p, n, kb):
    """(byte offset, first column, width) of packed panel p of an N-column weight: 64
    columns each, then the rest in one panel of 16, 32 or 48."""
    full = n // PANEL
    if p < full:
        return p * kb * 4 * PANEL, p * PANEL, PANEL
    return full * kb * 4 * PANEL, full * PANEL, (n - full * PANEL + NARROW - 1) // NARROW * NARROW


@njit(nogil=True, inline="always")
def _n_panels(n):
    return (n + PANEL - 1) // PANEL


@njit(nogil=True, inline="always")
def _tile(nv, full, x, r0, rows, data, w0, kbs, kb, z, t):
    """The micro-kernel nv vectors wide, of MR rows (`full`) or one."""
    if full:
        if nv == 4:
            _M4(x, r0, rows, data, w0, kbs, kb, z, t)
        elif nv == 3:
            _M3(x, r0, rows, data, w0, kbs, kb, z, t)
        elif nv == 2:
            _M2(x, r0, rows, data, w0, kbs, kb, z, t)
        else:
            _M1(x, r0, rows, data, w0, kbs, kb, z, t)
    elif nv == 4:
        _S4(x, r0, rows, data, w0, kbs, kb, z, t)
    elif nv == 3:
        _S3(x, r0, rows, data, w0, kbs, kb, z, t)
    elif nv == 2:
        _S2(x, r0, rows, data, w0, kbs, kb, z, t)
    else:
        _S1(x, r0, rows, data, w0, kbs, kb, z, t)


@njit(nogil=True, inline="always")
def _tile_width(width):
    """Columns per micro-kernel in a panel: all of them with 16 lanes, else 16."""
    return width if LANES == 16 else NARROW


@njit(nogil=True)
def _tiles(x, r0, rows, data, off, width, kb, z, t):
    """int32 sums of one panel for rows r0..r0+rows into t: tile j (tw columns) at
    t[j*MR*tw + r*tw + c]. Three or more rows take an MR-row tile, fewer one row each."""
    tw = _tile_width(width)
    nv = tw // LANES
    for j in range(width // tw):
        w0, zj, tj = off + 4 * j * tw, z[j * tw:], t[j * MR * tw:]
        if rows > 2:
            _tile(nv, True, x, r0, rows, data, w0, 4 * width, kb, zj, tj)
            continue
        for r in range(rows):
            _tile(nv, False, x, r0 + r, 1, data, w0, 4 * width, kb, zj, tj[r * tw:])


@njit(nogil=True, inline="always")
def _row(ts, s, b, o, cn, ep):
    """o[c] = (ts[c] * x_scale) * s[c] + b[c] (then ReLU), or that requantized
    (rint(y / y_scale) + y_zero, clamped), for c < cn: f32 operations in the order of the
    graph's dequantize, mul, add, relu and quantize, no contraction into FMAs, so that a
    requantized u8 value is the one the reference executor computes."""
    xs = np.float32(ep[0])
    relu, requant, ys, yz, qmin, qmax = ep[1:]
    zero = np.float32(0)
    if requant:
        inv, z = np.float32(ys), np.float32(yz)
        lo, hi = np.float32(qmin), np.float32(qmax)
        for c in range(cn):
            y = np.float32(ts[c]) * xs * s[c] + b[c]
            y = max(y, zero) if relu else y
            o[c] = min(max(np.rint(y / inv) + z, lo), hi)
    else:
        for c in range(cn):
            y = np.float32(ts[c]) * xs * s[c] + b[c]
            o[c] = max(y, zero) if relu else y


@njit(nogil=True)
def _epilogue(t, tw, out, r0, rows, n0, ncols, scale, bias, ep):
    """out[r0 + r, n0 + c] from the tiles' sums in t; whole tiles take loops of constant
    length (unrolled, no remainder: 2x faster than a loop of tw)."""
    for j in range((ncols + tw - 1) // tw):
        c0 = j * tw
        cn = min(ncols - c0, tw)
        s, b = scale[n0 + c0:], bias[n0 + c0:]
        for r in range(rows):
            o, ts = out[r0 + r, n0 + c0:], t[j * MR * tw + r * tw:]
            if cn == 64:
                _row(ts, s, b, o, 64, ep)
            elif cn == 32:
                _row(ts, s, b, o, 32, ep)
            elif cn == 16:
                _row(ts, s, b, o, 16, ep)
            else:
                _row(ts, s, b, o, cn, ep)


@njit(nogil=True)
def _block(x, w, ep, out, m0, m1, p0, p1):
    """Rows m0..m1 times panels p0..p1, on this thread (w as `prepare` gives it)."""
    data, z, scale, bias, kb, n = w
    t = np.empty(MR * PANEL, np.int32)
    for p in range(p0, p1):
        off, n0, width = _panel(p, n, kb)
        tw = _tile_width(width)
        for r0 in range(m0, m1, MR):
            rows = min(MR, m1 - r0)
            _tiles(x, r0, rows, data, off, width, kb, z[n0:], t)
            _epilogue(t, tw, out, r0, rows, n0, min(width, n - n0), scale, bias, ep)


@njit(nogil=True, parallel=True, link=False)
def _parallel(x, w, ep, out, parts, by_rows):
    m, npan = x.shape[0], _n_panels(w[5])
    rstep = ((m + MR - 1) // MR + parts - 1) // parts * MR
    pstep = (npan + parts - 1) // parts
    for t in prange(parts):
        if by_rows:
            _block(x, w, ep, out, min(m, t * rstep), min(m, (t + 1) * rstep), 0, npan)
        else:
            _block(x, w, ep, out, 0, m, min(npan, t * pstep), min(npan, (t + 1) * pstep))


@njit(nogil=True)
def prepare(w, zx):
    """The weight tuple for one input zero point (static quantization knows it at compile
    time): accumulators start at -zx * colsum (padded to whole panels)."""
    data, colsum, wscale, bias, kb, n = w
    z = np.zeros((n + NARROW - 1) // NARROW * NARROW, np.int32)  # whole panels' columns
    for c in range(n):
        z[c] = -zx * colsum[c]
    return (data, z, wscale, bias, kb, n)


@njit(nogil=True)
def qgemm_prepared(x, pw, ep, out, parts):
    """`qgemm_into` with the weight tuple `prepare` made."""
    m, npan = x.shape[0], _n_panels(pw[5])
    if parts > 1 and m * pw[4] * 4 * pw[5] >= QGEMM_PAR_WORK:
        by_rows = (m + MR - 1) // MR >= parts
        if by_rows or npan >= parts:
            _parallel(x, pw, ep, out, parts, by_rows)
            return
    _block(x, pw, ep, out, 0, m, 0, npan)


@njit(nogil=True)
def qgemm_into(x, zx, w, ep, out, parts):
    """out [M, N] = epilogue((x [M, >=4*kb] u8 - zx) @ packed w): w = QWeight.args(bias),
    ep = quantized.epilogue(...); row blocks (or, for few rows, panels) split between
    `parts` threads."""
    qgemm_prepared(x, prepare(w, zx), ep, out, parts)


@njit(nogil=True)
def quantize_rows(x, scale, zero, out):
    """out[:, :K] = clamp(rint(x / scale) + zero, 0, 255) as u8 for 2-d f32 x [M, K], the
    rest of out's row (K padding) 0. A true f32 division, as torch's `quantize` does: a
    product with 1/scale moves 3% of the digits pixels across a rounding boundary."""
    s, z = np.float32(scale), np.float32(zero)
    lo, hi = np.float32(0), np.float32(255)
    k = x.shape[1]
    for i in range(x.shape[0]):
        xr, o = x[i], out[i]
        for j in range(k):
            o[j] = np.uint8(min(max(np.rint(xr[j] / s) + z, lo), hi))
        for j in range(k, o.shape[0]):
            o[j] = 0


@njit(nogil=True, fastmath=True)
def quantize_into(x, inv_scale, zero, qmin, qmax, out):
    """out = clamp(rint(x / scale) + zero) for 2-d x, in f32 arithmetic (vectorized); out
    may be wider (K padding)."""
    s, z = np.float32(inv_scale), np.float32(zero)
    lo, hi = np.float32(qmin), np.float32(qmax)
    for i in range(x.shape[0]):
        xr, o = x[i], out[i]
        for j in range(x.shape[1]):
            o[j] = min(max(np.rint(xr[j] * s) + z, lo), hi)


@njit(nogil=True)
def _conv_image(x, shift, zx, pw, ep, geo, out, xt, cols, tmp, parts):
    """One image: x [C, H, W] (u8, or s8 with shift 128) -> HWC u8 -> im2col -> GEMM into
    tmp [OH*OW, OC] -> out [OC, OH, OW]. (The epilogue writing `out` through a transposed
    view took 2x the product's time: strided stores.)"""
    ch, h, wd = x.shape
    oc, oh, ow = out.shape
    for c in range(ch):
        for i in range(h):
            for j in range(wd):
                xt[i, j, c] = np.uint8((np.int32(x[c, i, j]) + shift) & 255)
    kh, kw, sh, sw, ph, pw_, dh, dw = geo
    im2col_nhwc(xt, cols, kh, kw, sh, sw, ph, pw_, dh, dw, oh, ow, np.uint8(zx))
    qgemm_prepared(cols, pw, ep, tmp, parts)
    o2 = out.reshape((oc, oh * ow))
    for p in range(oh * ow):
        for k in range(oc):
            o2[k, p] = tmp[p, k]


@njit(nogil=True, parallel=True, link=False)
def _conv_images(x, shift, zx, pw, ep, geo, out, xt, cols, tmp, parts):
    for t in prange(parts):
        for n in range(t, x.shape[0], parts):
            _conv_image(x[n], shift, zx, pw, ep, geo, out[n], xt[t], cols[t], tmp[t], 1)


@njit(nogil=True)
def qconv2d_prepared(x, shift, zx, pw, ep, geo, out, xt, cols, tmp, parts):
    """`qconv2d_into` with the weight tuple `prepare` made for the zero point zx."""
    nb = x.shape[0]
    parts = min(parts, cols.shape[0])
    if parts > 1 and nb >= parts and nb * out[0].size * pw[4] * 4 >= QGEMM_PAR_WORK:
        _conv_images(x, shift, zx, pw, ep, geo, out, xt, cols, tmp, parts)
        return
    for n in range(nb):
        _conv_image(x[n], shift, zx, pw, ep, geo, out[n], xt[0], cols[0], tmp[0], parts)


@njit(nogil=True)
def qconv2d_into(x, shift, zx, w, ep, geo, out, xt, cols, tmp, parts):
    """out [N, OC, OH, OW] = conv(x [N, C, H, W] u8/s8); zx is the u8 zero point (s8's +
    `shift` 128); scratch per thread: xt [H, W, C] u8, cols [OH*OW, 4*kb] u8, tmp
    [OH*OW, OC] of out's type."""
    qconv2d_prepared(x, shift, zx, prepare(w, zx), ep, geo, out, xt, cols, tmp, parts)


@njit(nogil=True, inline="always")
def _layer_epilogue(qp):
    """`quantized.epilogue(...)` from a layer's parameters qp (f32: [x scale, x zero point
    (u8), the product's zero point (u8), relu, dequantize scale, requantize, y scale, y
    zero point]), built in compiled code: no literal types, so every layer shares one
    specialization of the drivers."""
    return (np.float64(qp[4]), qp[3] != 0, qp[5] != 0, np.float64(qp[6]), np.int64(qp[7]),
            np.int64(0), np.int64(255))


@njit(nogil=True)
def _gemm_layer(xq, qp, data, start, scale, bias, out, parts):
    pw = (data, start, scale, bias, xq.shape[1] // 4, bias.shape[0])
    qgemm_prepared(xq, pw, _layer_epilogue(qp), out, parts)


@njit(nogil=True)
def qgemm_layer(x, qp, data, start, scale, bias, xq, out, parts):
    """One int8 linear layer, as the `qgemm` template's kernels call it: x [M, K] f32 into
    xq [M, 4*kb] u8 (`quantize_rows`), then out [M, N] = the product with the weight tuple
    `prepare` made and the epilogue of qp (`_layer_epilogue`): f32, or u8 requantized."""
    quantize_rows(x, qp[0], qp[1], xq)
    _gemm_layer(xq, qp, data, start, scale, bias, out, parts)


@njit(nogil=True)
def qgemm_layer_q(x, qp, data, start, scale, bias, xq, out, parts):
    """`qgemm_layer` of an input already in u8 (the previous layer requantized it): read in
    place when K is a multiple of 4, else copied into xq with zeros padding K."""
    if x.shape[1] == xq.shape[1]:
        _gemm_layer(x, qp, data, start, scale, bias, out, parts)
        return
    k = x.shape[1]
    for i in range(x.shape[0]):
        xq[i, :k] = x[i]
        xq[i, k:] = 0
    _gemm_layer(xq, qp, data, start, scale, bias, out, parts)


@njit(nogil=True)
def qconv_layer(x, qp, geo, data, start, scale, bias, xq, xt, cols, tmp, out, parts):
    """One int8 conv2d layer, as the `qconv` template's kernels call it: x [N, C, H, W] f32
    into xq (u8, x's shape), then `qconv_layer_q`."""
    nb, c, h, w = x.shape
    quantize_rows(x.reshape((nb * c, h * w)), qp[0], qp[1], xq.reshape((nb * c, h * w)))
    qconv_layer_q(xq, qp, geo, data, start, scale, bias, xq, xt, cols, tmp, out, parts)


@njit(nogil=True)
def qconv_layer_q(x, qp, geo, data, start, scale, bias, xq, xt, cols, tmp, out, parts):
    """One int8 conv2d layer of a u8 input x [N, C, H, W]: `qconv2d_prepared` with the u8
    zero point qp[2] as padding; geo int64 [kh, kw, sh, sw, ph, pw, dh, dw]; xq unused
    (the `qconv_layer` signature); tmp of out's type (f32, or u8 requantized)."""
    pw = (data, start, scale, bias, cols.shape[2] // 4, bias.shape[0])
    g = (geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], geo[6], geo[7])
    qconv2d_prepared(x, np.int64(0), np.int64(qp[2]), pw, _layer_epilogue(qp), g, out, xt,
                     cols, tmp, parts)
