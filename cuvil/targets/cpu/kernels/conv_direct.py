"""Direct NCHW f32 convolution: the register tile of `f32_tile` run over each image,
without im2col and without a BLAS call.

An image is first arranged so that every tap of every output pixel is a fixed offset from
that pixel: the padded planes, split by stride phase (`xs[c, u, v, i, j] = padded[c, i*sh +
u, j*sw + v]`, so a stride-s tap is a stride-1 tap of one phase plane). An unpadded,
stride-1 image is used as it is. The offset table `offs[k]`, k = (c, a, b) in the order of
the weight's rows, then holds the geometry; output row i, pixels j0.. read from i*Wq + j0 +
offs[k]. Both are per batch where they can be (`image_plan`, `direct_image_planned`): the
offsets are made once, and a thread clears its scratch for its first image only (the next
ones are copied to the same places). When no tap reaches sideways (1x1, or kernel =
stride) and rows are exactly `Wq` long, the whole image is one row of OH*OW pixels.

Work is split in units of (row, 16 or 32 pixels), or pairs of rows of exactly 16 pixels
(a vector each: a 16x16 image would otherwise leave half the tile idle), or 4 rows of 5-8
pixels, 2 to a vector (`f32_lines`: a stride-2 layer's output); images between
threads when there are at least as many images as threads, else the units of each image.
A stride-2 image is split into its phases sixteen pixels at a time (`copy_every_other`).

Most 3x3-like layers (taps reaching sideways, pixels 1 or 2 apart, at least 64 steps) run
on the pixel tile instead (`f32_pixels`: output channels in the vectors, one broadcast
input scalar per pixel, transposed in registers before the stores): its loads never split
across cache lines and a stride-2 image needs padding only, no phase split. Units are then
output rows. Measured per image on one thread: the CNN's 16 -> 32 stride-2 layer 10.1 ->
6.7 us, its 16-channel 3x3 13.5 -> 12.3 us, 32 channels on 8x8 17.1 -> 12.4 us; its stem
(3 channels, 27 steps) 10.5 -> 11.2, so it stays on the plain tile.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from cuvil.runtime.numba_cache import njit
from cuvil.targets.cpu.kernels.blas import GEMM_PAR_WORK
from cuvil.targets.cpu.kernels.f32_lines import copy_every_other, line_tile_kernel
from cuvil.targets.cpu.kernels.f32_pixels import pixel_tile_kernel
from cuvil.targets.cpu.kernels.f32_tile import LANES, MR, copy_floats, no_epilogue, tile_kernel

_T1, _T2 = tile_kernel(1), tile_kernel(2)
_L2 = line_tile_kernel(2, 2)
_P16, _P16_S2 = pixel_tile_kernel(16, 1, 1), pixel_tile_kernel(16, 1, 2)
_P8, _P8_S2 = pixel_tile_kernel(8, 1, 1), pixel_tile_kernel(8, 1, 2)
_P8W, _P8W_S2 = pixel_tile_kernel(8, 2, 1), pixel_tile_kernel(8, 2, 2)
PIXEL_MIN_STEPS = 64  # taps x input channels below which the pixel tile's transpose costs more


@njit(nogil=True, inline="always")
def _phases(geo, h, w):
    """(Hq, Wq): the size of a stride-phase plane of the padded image."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    return (h + 2 * ph + sh - 1) // sh, (w + 2 * pw + sw - 1) // sw


@njit(nogil=True, fastmath=True, link=False)
def _arrange(x, xs, geo, zero):
    """The image x [C, H, W] as a flat array of stride-phase planes (x itself when it is
    unpadded with stride 1). `zero`: clear xs first; without, xs must hold an image of the
    same shape arranged the same way (its zeros are where every such image has them)."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    ch, h, w = x.shape
    if ph == 0 and pw == 0 and sh == 1 and sw == 1:
        return x.reshape(ch * h * w)
    hq, wq = _phases(geo, h, w)
    size, xf = ch * sh * sw * hq * wq, x.reshape(ch * h * w)
    if xs.size < size:  # sized by lowering (`templates.conv`)
        raise ValueError("conv2d_nchw_direct: scratch for the arranged image is too small")
    for q in range(size if zero else 0):  # 0.3 us of a 16x16x16 image's 0.6
        xs[q] = 0
    if sh == 1 and sw == 1:  # padding only: no phase arithmetic (its divisions cost 1-2 us)
        for c in range(ch):
            for i in range(h):
                copy_floats(xs, (c * hq + i + ph) * wq + pw, xf, (c * h + i) * w, w)
        return xs[:size]
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
    """offs[(c*KH + a)*KW + b]: where tap (a, b) of channel c sits from an output pixel
    (each tap's place in its phase plane, computed once: per channel, its divisions cost
    the 8x8 layers 2 us an image)."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    taps = kh * kw
    offs = np.empty(ch * taps, np.intp)
    for a in range(kh):
        for b in range(kw):
            phase = ((a * dh) % sh) * sw + (b * dw) % sw
            offs[a * kw + b] = (phase * hq + (a * dh) // sh) * wq + (b * dw) // sw
    for c in range(1, ch):
        for t in range(taps):
            offs[c * taps + t] = offs[t] + c * sh * sw * hq * wq
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
    """(units, tiles per row, tile width, lines per vector): rows of 5-8 pixels go two to
    a vector, four to a tile (`f32_lines`); rows of exactly 16 two to a tile (a vector
    each); other rows are cut in tiles of 32 pixels, or 16 when shorter (rows of 4 or
    fewer: lowering takes im2col for those, or the pixel tile has them)."""
    rows, length, step = _rows(geo, hq, wq, oh, ow)
    if rows > 1 and 2 * length <= LANES < 4 * length:
        return (rows + 3) // 4, 1, 0, 2
    if length == LANES and rows > 1:
        return (rows + 1) // 2, 1, 0, 1
    width = 2 * LANES if length >= 2 * LANES else LANES
    per_row = (length + width - 1) // width
    return rows * per_row, per_row, width, 1


@njit(nogil=True, inline="always")
def _pixel_tiles(geo, kk):
    """Whether the pixel tile (`f32_pixels`: channels in the vectors) computes the
    convolution: taps reach sideways, pixels 1 or 2 apart, and enough steps to pay for the
    transpose (the CNN's stem, 27 steps, is faster on the plain tile)."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    return kw > 1 and (sw == 1 or sw == 2) and kk >= PIXEL_MIN_STEPS


@njit(nogil=True, inline="always")
def _arranged_geo(geo, ch):
    """The geometry the image is arranged by: for the pixel tile, padding only."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    pixels = _pixel_tiles(geo, ch * kh * kw)
    return (kh, kw, 1 if pixels else sh, 1 if pixels else sw, ph, pw, dh, dw)


@njit(nogil=True, fastmath=True)
def _pixel_rows(src, offs, wf, flat, shape, geo, wq, r0, r1, epi):
    """Output rows r0..r1 on the pixel tile: 16 pixels by 16 channels, or on rows of at
    most 8 pixels, 8 by 32 (16 when there are no more); the epilogue `epi` in its stores."""
    oc, oh, ow = shape
    bias, res, lo, hi, flags = epi
    sh, sw, plane, kk = geo[2], geo[3], oh * ow, offs.shape[0]
    mr = 16 if ow > 8 else 8
    cw = 32 if mr == 8 and oc > 16 else 16
    for i in range(r0, r1):  # a row's channel blocks outside its pixel tiles: one block's
        for co in range(0, oc, cw):  # weight rows stay in L1 along the row (ResNet's 7x7
            for j0 in range(0, ow, mr):  # stem: 37 KB of weights in all; 6% faster so)
                a = (src, i * sh * wq + j0 * sw, offs, kk, wf, co, oc, flat,
                     co * plane + i * ow + j0, plane, min(mr, ow - j0), min(cw, oc - co),
                     bias, res, lo, hi, flags)
                if mr == 16 and sw == 1:
                    _P16(*a)
                elif mr == 16:
                    _P16_S2(*a)
                elif cw == 16 and sw == 1:
                    _P8(*a)
                elif cw == 16:
                    _P8_S2(*a)
                elif sw == 1:
                    _P8W(*a)
                else:
                    _P8W_S2(*a)


@njit(nogil=True, fastmath=True, link=False)
def _units(src, offs, wk, out, geo, hq, wq, u0, u1, epi):
    """Units u0..u1 of one image (see `_n_units`), every channel tile of each; the
    epilogue `epi` only on the pixel tile."""
    oc, oh, ow = out.shape
    flat, ldw, kk = out.reshape(oc * oh * ow), wk.shape[1], offs.shape[0]
    wf = wk.reshape(wk.size)
    if _pixel_tiles(geo, kk):
        _pixel_rows(src, offs, wf, flat, out.shape, geo, wq, u0, u1, epi)
        return
    rows, length, step = _rows(geo, hq, wq, oh, ow)
    units, per_row, width, g = _tiling(geo, hq, wq, oh, ow)
    if g > 1:
        _lines(src, offs, wf, ldw, flat, (rows, length, step), u0, u1)
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
def _lines(src, offs, wf, ldw, flat, shape, u0, u1):
    """Units u0..u1 of short rows, 4 rows each, 2 to a vector (see `_tiling`)."""
    rows, length, step = shape
    oc, plane, kk = ldw, flat.size // ldw, offs.shape[0]
    for u in range(u0, u1):
        first = 4 * u
        for co in range(0, oc, MR):
            _L2(src, first * step, offs, kk, wf, co, ldw, 1, flat, co * plane + first * length,
                plane, min(MR, oc - co), length, min(4, rows - first), step, length)


@njit(nogil=True, inline="always")
def _n_units(geo, kk, hq, wq, oh, ow):
    """Units of work in an image: output rows on the pixel tile, else `_tiling`'s."""
    return oh if _pixel_tiles(geo, kk) else _tiling(geo, hq, wq, oh, ow)[0]


@njit(nogil=True, inline="always")
def image_plan(x, geo):
    """What every image shaped like x [C, H, W] shares: (its arranged geometry, Hq, Wq, its
    tap offsets); made once per batch (the offsets: 0.17 us an image of 16 channels)."""
    ch, h, w = x.shape
    ag = _arranged_geo(geo, ch)
    hq, wq = _phases(ag, h, w)
    return ag, hq, wq, _offsets(ch, ag, hq, wq)


@njit(nogil=True, link=False)
def direct_image_planned(x, wk, out, xs, geo, epi, plan, zero):
    """One image on its batch's `image_plan`, with the epilogue epi = (bias [OC], residual
    [OC*OH*OW], lo, hi, flags: 1 bias, 2 residual, 4 a clip) in the tile's stores where the
    pixel tile computes it; returns whether it did (if not, the caller applies the
    epilogue). zero: whether xs must be cleared (False for a thread's later images of one
    batch: each one's arrangement overwrites only what the first one's wrote)."""
    ag, hq, wq, offs = plan
    _units(_arrange(x, xs, ag, zero), offs, wk, out, geo, hq, wq, 0,
           _n_units(geo, offs.shape[0], hq, wq, out.shape[1], out.shape[2]), epi)
    return _pixel_tiles(geo, offs.shape[0])


@njit(nogil=True)
def conv2d_nchw_direct_image(x, wk, out, xs, geo):
    """One image: out [OC, OH, OW] = conv(x [C, H, W], wk [C*KH*KW, OC]); xs: scratch
    for the arranged image (see `_arrange`)."""
    direct_image_planned(x, wk, out, xs, geo, no_epilogue(), image_plan(x, geo), True)


@njit(nogil=True, parallel=True, link=False)
def _images(x, wk, out, xs, geo, parts, ag, hq, wq, offs):
    for t in prange(parts):  # the plan in parts: a tuple holding an array cannot enter a
        for n in range(t, x.shape[0], parts):  # parallel loop
            direct_image_planned(x[n], wk, out[n], xs[t], geo, no_epilogue(), (ag, hq, wq, offs),
                                 n == t)


@njit(nogil=True, parallel=True, link=False)
def _split_image(src, offs, wk, out, geo, hq, wq, parts):
    units = _n_units(geo, offs.shape[0], hq, wq, out.shape[1], out.shape[2])
    step = (units + parts - 1) // parts
    for t in prange(parts):
        _units(src, offs, wk, out, geo, hq, wq, min(units, t * step), min(units, (t + 1) * step),
               no_epilogue())


@njit(nogil=True)
def conv2d_nchw_direct(x, wk, out, xs, geo, parts):
    """The batch: out [N, OC, OH, OW] = conv(x [N, C, H, W], wk [C*KH*KW, OC]); xs:
    scratch [threads, arranged image] (1 float when images are used as they are)."""
    nb = x.shape[0]
    work = wk.size * out.shape[2] * out.shape[3] * nb
    parts = min(parts, xs.shape[0]) if work >= GEMM_PAR_WORK else 1
    if parts > 1 and nb >= parts:
        _images(x, wk, out, xs, geo, parts, *image_plan(x[0], geo))
        return
    direct_each(x, wk, out, xs, geo, parts)


@njit(nogil=True, inline="always")
def direct_each(x, wk, out, xs, geo, parts):
    """`conv2d_nchw_direct` image by image, each image's units split between `parts`
    threads (1: this thread): what a caller with fewer images than threads calls, so that
    the images' parallel region (`_images`) is not compiled into it."""
    ag, hq, wq, offs = image_plan(x[0], geo)
    for n in range(x.shape[0]):
        src = _arrange(x[n], xs[0], ag, n == 0)
        if parts > 1:
            _split_image(src, offs, wk, out[n], geo, hq, wq, parts)
        else:
            _units(src, offs, wk, out[n], geo, hq, wq, 0, _n_units(
                geo, offs.shape[0], hq, wq, out.shape[2], out.shape[3]), no_epilogue())

