"""Direct NCHW f32 convolution: the register tile of `f32_tile` run over each image,
without im2col and without a BLAS call.

An image is first arranged so that every tap of every output pixel is a fixed offset from
that pixel: the padded planes, split by stride phase (`xs[c, u, v, i, j] = padded[c, i*sh +
u, j*sw + v]`, so a stride-s tap is a stride-1 tap of one phase plane). An unpadded,
stride-1 image is used as it is. The offset table `offs[k]`, k = (c, a, b) in the order of
the weight's rows, then holds the geometry; output row i, pixels j0.. read from i*Wq + j0 +
offs[k]. When no tap reaches sideways (1x1, or kernel = stride) and rows are exactly
`Wq` long, the whole image is one row of OH*OW pixels.

Work is split in units of (row, 16 or 32 pixels), or pairs of rows of exactly 16 pixels
(a vector each: a 16x16 image would otherwise leave half the tile idle), or 2g rows of at
most 8 pixels, g to a vector (`f32_lines`: a stride-2 layer's output); images between
threads when there are at least as many images as threads, else the units of each image.
A stride-2 image is split into its phases sixteen pixels at a time (`copy_every_other`).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from cuvil.runtime.blas import GEMM_PAR_WORK
from cuvil.runtime.f32_lines import copy_every_other, line_tile_kernel
from cuvil.runtime.f32_tile import LANES, MR, copy_floats, tile_kernel
from cuvil.runtime.numba_cache import njit

_T1, _T2 = tile_kernel(1), tile_kernel(2)
_L2, _L4 = line_tile_kernel(2, 2), line_tile_kernel(2, 4)


@njit(nogil=True, inline="always")
def _phases(geo, h, w):
    """(Hq, Wq): the size of a stride-phase plane of the padded image."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    return (h + 2 * ph + sh - 1) // sh, (w + 2 * pw + sw - 1) // sw


@njit(nogil=True, fastmath=True)
def _arrange(x, xs, geo):
    """The image x [C, H, W] as a flat array of stride-phase planes (x itself when it is
    unpadded with stride 1)."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    ch, h, w = x.shape
    if ph == 0 and pw == 0 and sh == 1 and sw == 1:
        return x.reshape(ch * h * w)
    hq, wq = _phases(geo, h, w)
    size, xf = ch * sh * sw * hq * wq, x.reshape(ch * h * w)
    if xs.size < size:  # sized by lowering (`templates.conv`)
        raise ValueError("conv2d_nchw_direct: scratch for the arranged image is too small")
    for q in range(size):
        xs[q] = 0
    for c in range(ch):
        for u in range(sh):
            for v in range(sw):
                plane = ((c * sh + u) * sw + v) * hq * wq
                j0 = max(0, (pw - v + sw - 1) // sw)
                j1 = min(wq, (w - 1 + pw - v) // sw + 1)
                i0, i1 = (ph - u + sh - 1) // sh, min(hq, (h - 1 + ph - u) // sh + 1)
                for i in range(i0, i1):
                    at, src = plane + i * wq, (c * h + i * sh + u - ph) * w + v - pw
                    if sw == 1:  # rows of 16-32 pixels: under LLVM's vector loop minimum
                        copy_floats(xs, at + j0, xf, src + j0, j1 - j0)
                    elif sw == 2:  # scalar, this was 5.6 us of a 16x16x16 image
                        copy_every_other(xs, at + j0, xf, src + 2 * j0, j1 - j0)
                    else:
                        for j in range(j0, j1):
                            xs[at + j] = xf[src + j * sw]
    return xs[:size]


@njit(nogil=True)
def _offsets(ch, geo, hq, wq):
    """offs[(c*KH + a)*KW + b]: where tap (a, b) of channel c sits from an output pixel."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    offs = np.empty(ch * kh * kw, np.intp)
    for c in range(ch):
        for a in range(kh):
            for b in range(kw):
                phase = (c * sh + (a * dh) % sh) * sw + (b * dw) % sw
                offs[(c * kh + a) * kw + b] = (phase * hq + (a * dh) // sh) * wq + (b * dw) // sw
    return offs


@njit(nogil=True, inline="always")
def _rows(geo, hq, wq, oh, ow):
    """(rows, row length, row step in the arranged planes): one row per output row, or
    one for the whole image when no tap reaches sideways and rows are Wq long."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    if (kw - 1) * dw < sw and ow == wq:
        return 1, oh * ow, 0
    return oh, ow, wq


@njit(nogil=True, inline="always")
def _tiling(geo, hq, wq, oh, ow):
    """(units, tiles per row, tile width, lines per vector): rows of at most 8 pixels go
    g = 2 or 4 to a vector, 2g to a tile (`f32_lines`); rows of exactly 16 two to a tile
    (a vector each); other rows are cut in tiles of 32 pixels, or 16 when shorter."""
    rows, length, step = _rows(geo, hq, wq, oh, ow)
    if rows > 1 and 2 * length <= LANES:
        g = 2 if 4 * length > LANES else 4
        return (rows + 2 * g - 1) // (2 * g), 1, 0, g
    if length == LANES and rows > 1:
        return (rows + 1) // 2, 1, 0, 1
    width = 2 * LANES if length >= 2 * LANES else LANES
    per_row = (length + width - 1) // width
    return rows * per_row, per_row, width, 1


@njit(nogil=True, fastmath=True)
def _units(src, offs, wk, out, geo, hq, wq, u0, u1):
    """Units u0..u1 of one image (see `_tiling`), every channel tile of each."""
    oc, oh, ow = out.shape
    rows, length, step = _rows(geo, hq, wq, oh, ow)
    units, per_row, width, g = _tiling(geo, hq, wq, oh, ow)
    flat, ldw, kk = out.reshape(oc * oh * ow), wk.shape[1], offs.shape[0]
    wf = wk.reshape(wk.size)
    if g > 1:
        _lines(src, offs, wf, ldw, flat, (rows, length, step), g, u0, u1)
        return
    for u in range(u0, u1):
        if width == 0:  # rows 2u and 2u + 1, a vector each
            q0, d0, cols, xv, dv = 2 * u * step, 2 * u * length, LANES * min(2, rows - 2 * u), \
                step, length
        else:
            i, j0 = u // per_row, (u % per_row) * width
            q0, d0, cols, xv, dv = i * step + j0, i * length + j0, min(width, length - j0), \
                LANES, LANES
        for co in range(0, oc, MR):
            rows_left, at = min(MR, oc - co), co * oh * ow + d0
            if width != LANES:
                _T2(src, q0, offs, kk, wf, co, ldw, 1, flat, at, oh * ow, rows_left, cols, xv, dv)
            else:
                _T1(src, q0, offs, kk, wf, co, ldw, 1, flat, at, oh * ow, rows_left, cols, xv, dv)


@njit(nogil=True, fastmath=True)
def _lines(src, offs, wf, ldw, flat, shape, g, u0, u1):
    """Units u0..u1 of short rows, 2g rows each, g to a vector (see `_tiling`)."""
    rows, length, step = shape
    oc, plane, kk = ldw, flat.size // ldw, offs.shape[0]
    for u in range(u0, u1):
        first = 2 * g * u
        lines = min(2 * g, rows - first)
        for co in range(0, oc, MR):
            at = co * plane + first * length
            if g == 2:
                _L2(src, first * step, offs, kk, wf, co, ldw, 1, flat, at, plane, min(MR, oc - co),
                    length, lines, step, length)
            else:
                _L4(src, first * step, offs, kk, wf, co, ldw, 1, flat, at, plane, min(MR, oc - co),
                    length, lines, step, length)


@njit(nogil=True, inline="always")
def _n_units(geo, hq, wq, oh, ow):
    return _tiling(geo, hq, wq, oh, ow)[0]


@njit(nogil=True)
def conv2d_nchw_direct_image(x, wk, out, xs, geo):
    """One image: out [OC, OH, OW] = conv(x [C, H, W], wk [C*KH*KW, OC]); xs: scratch
    for the arranged image (see `_arrange`)."""
    ch, h, w = x.shape
    hq, wq = _phases(geo, h, w)
    src, offs = _arrange(x, xs, geo), _offsets(ch, geo, hq, wq)
    _units(src, offs, wk, out, geo, hq, wq, 0, _n_units(geo, hq, wq, out.shape[1],
                                                        out.shape[2]))


@njit(nogil=True, parallel=True)
def _images(x, wk, out, xs, geo, parts):
    for t in prange(parts):
        for n in range(t, x.shape[0], parts):
            conv2d_nchw_direct_image(x[n], wk, out[n], xs[t], geo)


@njit(nogil=True, parallel=True)
def _split_image(src, offs, wk, out, geo, hq, wq, parts):
    units = _n_units(geo, hq, wq, out.shape[1], out.shape[2])
    step = (units + parts - 1) // parts
    for t in prange(parts):
        _units(src, offs, wk, out, geo, hq, wq, min(units, t * step), min(units, (t + 1) * step))


@njit(nogil=True)
def conv2d_nchw_direct(x, wk, out, xs, geo, parts):
    """The batch: out [N, OC, OH, OW] = conv(x [N, C, H, W], wk [C*KH*KW, OC]); xs:
    scratch [threads, arranged image] (1 float when images are used as they are)."""
    nb, ch, h, w = x.shape
    work = wk.size * out.shape[2] * out.shape[3] * nb
    parts = min(parts, xs.shape[0]) if work >= GEMM_PAR_WORK else 1
    if parts > 1 and nb >= parts:
        _images(x, wk, out, xs, geo, parts)
        return
    hq, wq = _phases(geo, h, w)
    offs = _offsets(ch, geo, hq, wq)
    for n in range(nb):
        src = _arrange(x[n], xs[0], geo)
        if parts > 1:
            _split_image(src, offs, wk, out[n], geo, hq, wq, parts)
        else:
            _units(src, offs, wk, out[n], geo, hq, wq, 0, _n_units(geo, hq, wq, out.shape[2],
                                                                   out.shape[3]))

