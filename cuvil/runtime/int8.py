"""Quantized GEMM and convolution kernels: u8 activations x s8 weights, int32 sums, and a
fused epilogue (dequantize, bias, ReLU; or requantize to u8/s8 for the next int8 op).
`cuvil.runtime.quantized` packs weights and calls these from Python; generated code (the
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

Numba's cache checks only this file's own stamp: the micro-kernel lives here so that a
change to it recompiles the drivers that inline it.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from cuvil.runtime.numba_cache import njit

MR = 6  # rows per tile
PANEL, NARROW = 64, 16  # columns per packed panel; the last panel: a multiple of 16
MAX_K = 65536  # |sum (x - zx) w| <= K * 255 * 128 must fit in int32
QGEMM_PAR_WORK = 1 << 21  # multiply-adds below which one thread is faster


def target_vnni() -> int:
    """Vector lanes (int32) of the VNNI instruction Numba's target has: 16 (AVX-512
    VNNI), 8 (AVX-VNNI), 0 (none: plain vector IR)."""
    from llvmlite import binding

    if numba.config.CPU_NAME and numba.config.CPU_NAME != "host":
        features = set((numba.config.CPU_FEATURES or "").split(","))
        has = {f.lstrip("+") for f in features if f.startswith("+")}
    else:
        has = {k for k, v in binding.get_host_cpu_features().items() if v}
    if {"avx512vnni", "avx512bw", "avx512vl"} <= has:
        return 16
    return 8 if "avxvnni" in has else 0


VNNI = target_vnni()
LANES = VNNI or 8
WIDE = PANEL if LANES == 16 else NARROW  # columns per tile in a wide panel


def _row_pointers(builder, xp, x_strides, r0, rows, mr):
    """i32* to each of the tile's rows; rows past `rows` repeat the last one."""
    intp = r0.type
    last = builder.sub(rows, ir.Constant(intp, 1))
    out = []
    for r in range(mr):
        rc = ir.Constant(intp, r)
        row = builder.add(r0, builder.select(builder.icmp_signed("<", rc, last), rc, last))
        ptr = builder.gep(xp, [builder.mul(row, x_strides[0])])
        out.append(builder.bitcast(ptr, ir.IntType(32).as_pointer()))
    return out


def _dot4(builder, acc, xb, wv, lanes, vnni):
    """acc[i] += sum_j u8(xb[i])[j] * s8(wv[i])[j], j < 4: vpdpbusd, or its plain IR."""
    vec = acc.type
    if vnni:
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec] * 3),
                                            f"llvm.x86.avx512.vpdpbusd.{32 * lanes}")
        return builder.call(fn, [acc, xb, wv])
    wide, byte = ir.VectorType(ir.IntType(32), 4 * lanes), ir.VectorType(ir.IntType(8), 4 * lanes)
    p = builder.mul(builder.zext(builder.bitcast(xb, byte), wide),
                    builder.sext(builder.bitcast(wv, byte), wide))
    for j in range(4):
        pick = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [4 * i + j for i in range(lanes)])
        acc = builder.add(acc, builder.shuffle_vector(p, p, pick))
    return acc


def _tile_ir(builder, rowp, wbase, kbs, kb, zp, tp, mr, nv, lanes, vnni):
    """The loop over K/4: accumulators live in registers (phis), start at the column
    vectors at `zp` and are stored to `tp` at the end."""
    intp, vec = kb.type, ir.VectorType(ir.IntType(32), lanes)
    pre, zero = builder.block, ir.Constant(vec, None)
    zv = builder.bitcast(zp, vec.as_pointer())
    init = [builder.load(builder.gep(zv, [ir.Constant(intp, v)]), align=4) for v in range(nv)]
    loop, done = builder.append_basic_block("qtile"), builder.append_basic_block("qdone")
    builder.cbranch(builder.icmp_signed(">", kb, ir.Constant(intp, 0)), loop, done)
    builder.position_at_end(loop)
    k = builder.phi(intp)
    accs = [builder.phi(vec) for _ in range(mr * nv)]
    wrow = builder.gep(wbase, [builder.mul(k, kbs)])
    ws = []
    for v in range(nv):
        ptr = builder.gep(wrow, [ir.Constant(intp, 4 * lanes * v)])
        ws.append(builder.load(builder.bitcast(ptr, vec.as_pointer()), align=1))
    new = []
    for r in range(mr):
        xv = builder.load(builder.gep(rowp[r], [k]), align=1)
        undef = ir.Constant(vec, ir.Undefined)
        one = builder.insert_element(undef, xv, ir.Constant(ir.IntType(32), 0))
        xb = builder.shuffle_vector(one, undef, zero)  # four bytes to every lane
        new += [_dot4(builder, accs[r * nv + v], xb, ws[v], lanes, vnni) for v in range(nv)]
    k1 = builder.add(k, ir.Constant(intp, 1))
    k.add_incoming(ir.Constant(intp, 0), pre)
    k.add_incoming(k1, builder.block)
    for i, (a, n) in enumerate(zip(accs, new, strict=True)):
        a.add_incoming(init[i % nv], pre)
        a.add_incoming(n, builder.block)
    builder.cbranch(builder.icmp_signed("<", k1, kb), loop, done)
    builder.position_at_end(done)
    final = []
    for i, n in enumerate(new):
        final.append(builder.phi(vec))
        final[-1].add_incoming(init[i % nv], pre)
        final[-1].add_incoming(n, loop)
    out = builder.bitcast(tp, vec.as_pointer())
    for i, a in enumerate(final):
        builder.store(a, builder.gep(out, [ir.Constant(intp, i)]), align=4)


@cache
def tile_kernel(mr: int, nv: int, lanes: int = LANES, vnni: bool = bool(VNNI)):
    """`tile(x, r0, rows, w, w0, kbs, kb, z, t)`: t[r * nv*lanes + c] (int32) = z[c] + the
    sum over kb steps of 4 along K of x[r0 + r, 4k:4k+4] . w[w0 + k*kbs + 4c : +4], for mr
    rows (rows past `rows` repeat the last one) and nv*lanes columns."""

    @intrinsic
    def tile(typingctx, x, r0, rows, w, w0, kbs, kb, z, t):
        sig = types.void(x, types.intp, types.intp, w, types.intp, types.intp, types.intp, z, t)

        def codegen(context, builder, signature, args):
            xa = context.make_array(signature.args[0])(context, builder, args[0])
            wp = context.make_array(signature.args[3])(context, builder, args[3]).data
            zp = context.make_array(signature.args[7])(context, builder, args[7]).data
            tp = context.make_array(signature.args[8])(context, builder, args[8]).data
            strides = cgutils.unpack_tuple(builder, xa.strides, 2)
            xp = builder.bitcast(xa.data, ir.IntType(8).as_pointer())
            rowp = _row_pointers(builder, xp, strides, args[1], args[2], mr)
            wbase = builder.gep(builder.bitcast(wp, ir.IntType(8).as_pointer()), [args[4]])
            _tile_ir(builder, rowp, wbase, args[5], args[6], zp, tp, mr, nv, lanes, vnni)
            return context.get_dummy_value()

        return sig, codegen

    return tile


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


@njit(nogil=True, fastmath=True, inline="always")
def _row(ts, s, b, o, cn, ep):
    """o[c] = ts[c] * s[c] + b[c] (then ReLU), or that requantized, for c < cn (all f32)."""
    relu, requant, inv_ys, yz, qmin, qmax = ep[1:]
    if requant:
        inv, z = np.float32(inv_ys), np.float32(yz)
        lo, hi = np.float32(max(qmin, yz) if relu else qmin), np.float32(qmax)
        for c in range(cn):
            o[c] = min(max(np.rint((np.float32(ts[c]) * s[c] + b[c]) * inv) + z, lo), hi)
    else:
        for c in range(cn):
            y = np.float32(ts[c]) * s[c] + b[c]
            o[c] = max(y, np.float32(0)) if relu else y


@njit(nogil=True, fastmath=True)
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


@njit(nogil=True, parallel=True)
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
def prepare(w, zx, xs):
    """The weight tuple for one input zero point and scale (static quantization knows both
    at compile time): accumulators start at -zx * colsum (padded to whole panels), and the
    per-column scale is xs * w_scale."""
    data, colsum, wscale, bias, kb, n = w
    z = np.zeros((n + NARROW - 1) // NARROW * NARROW, np.int32)  # whole panels' columns
    for c in range(n):
        z[c] = -zx * colsum[c]
    return (data, z, np.float32(xs) * wscale, bias, kb, n)


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
    qgemm_prepared(x, prepare(w, zx, ep[0]), ep, out, parts)


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
def _im2col_q(xt, cols, geo, pad, oh, ow):
    """xt [H, W, C] u8 -> cols [OH*OW, >=KH*KW*C]; outside the image, the zero point.
    Element loops: slice assignments cost ~40 ns each, more than a short channel run."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    h, wd, ch = xt.shape
    fill = np.uint8(pad)
    for i in range(oh):
        for j in range(ow):
            row = i * ow + j
            for a in range(kh):
                hh = i * sh - ph + a * dh
                for b in range(kw):
                    ww = j * sw - pw + b * dw
                    base = (a * kw + b) * ch
                    if 0 <= hh < h and 0 <= ww < wd:
                        for c in range(ch):
                            cols[row, base + c] = xt[hh, ww, c]
                    else:
                        for c in range(ch):
                            cols[row, base + c] = fill


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
    _im2col_q(xt, cols, geo, zx, oh, ow)
    qgemm_prepared(cols, pw, ep, tmp, parts)
    o2 = out.reshape((oc, oh * ow))
    for p in range(oh * ow):
        for k in range(oc):
            o2[k, p] = tmp[p, k]


@njit(nogil=True, parallel=True)
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
    qconv2d_prepared(x, shift, zx, prepare(w, zx, ep[0]), ep, geo, out, xt, cols, tmp, parts)


@njit(nogil=True, inline="always")
def _f32_epilogue(relu):
    """`quantized.epilogue(x_scale, relu)` as built in compiled code: no literal types, so
    every caller shares one specialization of the drivers."""
    return (1.0, relu, np.bool_(False), 1.0, np.int64(0), np.int64(0), np.int64(255))


@njit(nogil=True)
def qgemm_layer(x, qp, data, start, scale, bias, xq, out, parts):
    """One int8 linear layer, as the `qgemm` template's kernels call it: x [M, K] f32 into
    xq [M, 4*kb] u8 (`quantize_rows`, qp = [scale, u8 zero point, -, relu]), then out
    [M, N] f32 = the product with the weight tuple `prepare` made, ReLU if qp[3]."""
    quantize_rows(x, qp[0], qp[1], xq)
    pw = (data, start, scale, bias, xq.shape[1] // 4, bias.shape[0])
    qgemm_prepared(xq, pw, _f32_epilogue(qp[3] != 0), out, parts)


@njit(nogil=True)
def qconv_layer(x, qp, geo, data, start, scale, bias, xq, xt, cols, tmp, out, parts):
    """One int8 conv2d layer, as the `qconv` template's kernels call it: x [N, C, H, W] f32
    into xq (u8, x's shape), then `qconv2d_prepared` with the u8 zero point qp[2] as
    padding; geo int64 [kh, kw, sh, sw, ph, pw, dh, dw]."""
    nb, c, h, w = x.shape
    quantize_rows(x.reshape((nb * c, h * w)), qp[0], qp[1], xq.reshape((nb * c, h * w)))
    pw = (data, start, scale, bias, cols.shape[2] // 4, bias.shape[0])
    g = (geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], geo[6], geo[7])
    ep = _f32_epilogue(qp[3] != 0)
    qconv2d_prepared(xq, np.int64(0), np.int64(qp[2]), pw, ep, g, out, xt, cols, tmp, parts)


def source_hash() -> str:
    """A hash of this file, which generated modules quote to key their caches."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
