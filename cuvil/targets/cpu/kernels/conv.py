"""Convolution drivers shared by every generated module (compiled once per installation).

Geometry (kernel size, stride, padding, dilation) arrives as integers, so one compiled
driver serves every convolution; the generated kernel calls it and then applies its own
fused epilogue. Parallelism comes from Numba's pool (BLAS runs single-threaded, see
`blas`): images are split between threads, or, for fewer images than threads, the
product's rows.

* `conv2d_nhwc`: im2col into `cols[OH*OW, KH*KW*C]` (contiguous channel runs), then
  `cols @ W'`; a 1x1, stride-1, unpadded convolution is one product over all pixels.
* `conv2d_nchw`: each image transposed to HWC, then the NHWC path, then the result
  transposed back (16 images of 16x16x16, 3x3: 0.75 ms; NCHW's own im2col: 1.7 ms).
* `depthwise_nchw` / `depthwise_nhwc`: direct loops, the NHWC one vectorized over channels.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from cuvil.runtime.numba_cache import njit
from cuvil.targets.cpu.kernels.blas import GEMM_PAR_WORK, gemm


@njit(nogil=True, inline="always")
def _span(out_len, size, k_off, stride, pad):
    """Output positions j with 0 <= j * stride - pad + k_off < size: [j0, j1)."""
    lo = pad - k_off
    j0 = 0 if lo <= 0 else (lo + stride - 1) // stride
    hi = size - 1 + pad - k_off
    j1 = 0 if hi < 0 else min(out_len, hi // stride + 1)
    return j0, max(j0, j1)


@njit(nogil=True, fastmath=True)
def im2col_nchw(x, cols, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    """x [C, H, W] -> cols [C*KH*KW, OH*OW]."""
    ch, h, w = x.shape
    for c in range(ch):
        for a in range(kh):
            i0, i1 = _span(oh, h, a * dh, sh, ph)
            for b in range(kw):
                row = (c * kh + a) * kw + b
                j0, j1 = _span(ow, w, b * dw, sw, pw)
                for i in range(oh):
                    base = i * ow
                    if i < i0 or i >= i1:
                        for j in range(ow):
                            cols[row, base + j] = 0
                        continue
                    hh = i * sh - ph + a * dh
                    for j in range(j0):
                        cols[row, base + j] = 0
                    off = b * dw - pw
                    for j in range(j0, j1):
                        cols[row, base + j] = x[c, hh, j * sw + off]
                    for j in range(j1, ow):
                        cols[row, base + j] = 0


@njit(nogil=True, fastmath=True)
def im2col_nhwc(x, cols, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, fill):
    """x [H, W, C] -> cols [OH*OW, KH*KW*C]; `fill` outside the image (0, or an int8
    input's zero point)."""
    h, w, ch = x.shape
    for i in range(oh):
        for j in range(ow):
            row = i * ow + j
            for a in range(kh):
                hh = i * sh - ph + a * dh
                for b in range(kw):
                    ww = j * sw - pw + b * dw
                    base = (a * kw + b) * ch
                    if 0 <= hh < h and 0 <= ww < w:
                        for c in range(ch):
                            cols[row, base + c] = x[hh, ww, c]
                    else:
                        for c in range(ch):
                            cols[row, base + c] = fill


@njit(nogil=True, fastmath=True)
def _nchw_image(x, wp, out, cols, xt, tmp, geo):
    """One NCHW image through the NHWC path: x [C, H, W] -> xt [H, W, C] -> im2col ->
    tmp [OH*OW, OC] = cols @ wp -> out [OC, OH, OW]. NCHW's own im2col copies rows only
    OW long, with bounds work per row: 4x slower here than the channel-run copies."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    ch, h, w = x.shape
    oc, oh, ow = out.shape
    for c in range(ch):
        for i in range(h):
            for j in range(w):
                xt[i, j, c] = x[c, i, j]
    im2col_nhwc(xt, cols, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, 0)
    np.dot(cols, wp, tmp)
    o2 = out.reshape((oc, oh * ow))
    for p in range(oh * ow):
        for k in range(oc):
            o2[k, p] = tmp[p, k]


conv2d_nchw_image = _nchw_image  # one image, for kernels that loop over images themselves


@njit(nogil=True)
def conv1x1_nchw_image(x, wm, out):
    """One image of a 1x1 convolution: out [OC, H, W] = wm [OC, C] @ x [C, H, W]."""
    ch, h, w = x.shape
    np.dot(wm, x.reshape((ch, h * w)), out.reshape((wm.shape[0], h * w)))


@njit(nogil=True)
def conv2d_nchw_few_image(x, wm, out, cols, geo):
    """One image of `conv2d_nchw_few`."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    oc, oh, ow = out.shape
    im2col_nchw(x, cols, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)
    np.dot(wm, cols, out.reshape((oc, oh * ow)))


@njit(nogil=True, parallel=True, link=False)
def _images_nchw(x, wp, out, cols, xt, tmp, geo, parts):
    for t in prange(parts):
        for n in range(t, x.shape[0], parts):
            _nchw_image(x[n], wp, out[n], cols[t], xt[t], tmp[t], geo)


@njit(nogil=True)
def conv2d_nchw(x, wp, out, cols, xt, tmp, geo, parts):
    """out [N, OC, OH, OW] = conv(x [N, C, H, W], wp [KH*KW*C, OC]); geo = (kh, kw, sh, sw,
    ph, pw, dh, dw); scratch per thread: cols [OH*OW, KH*KW*C], xt [H, W, C], tmp [OH*OW,
    OC]."""
    nb = x.shape[0]
    parts = min(parts, cols.shape[0])
    if parts > 1 and nb >= parts and wp.size * out.shape[2] * out.shape[3] * nb >= \
            GEMM_PAR_WORK:
        _images_nchw(x, wp, out, cols, xt, tmp, geo, parts)
        return
    nchw_each(x, wp, out, cols, xt, tmp, geo)


@njit(nogil=True, inline="always")
def nchw_each(x, wp, out, cols, xt, tmp, geo):
    """`conv2d_nchw` image by image on this thread (the `_each` functions: what a caller
    with fewer images than threads calls, without the images' parallel region)."""
    for n in range(x.shape[0]):
        _nchw_image(x[n], wp, out[n], cols[0], xt[0], tmp[0], geo)


@njit(nogil=True, parallel=True, link=False)
def _images_nchw_few(x, wm, out, cols, geo, parts):
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    nb, oc, oh, ow = out.shape
    for t in prange(parts):
        for n in range(t, nb, parts):
            im2col_nchw(x[n], cols[t], kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)
            gemm(wm, cols[t], out[n].reshape((oc, oh * ow)), 1)


@njit(nogil=True)
def conv2d_nchw_few(x, wm, out, cols, geo, parts):
    """NCHW with few input channels (an RGB stem): im2col rows of OW straight from the
    planes, `wm [OC, C*KH*KW] @ cols [C*KH*KW, OH*OW]` (per-pixel channel runs of 3 would
    cost more than the rows)."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    nb, oc, oh, ow = out.shape
    parts = min(parts, cols.shape[0])
    if parts > 1 and nb >= parts and wm.size * oh * ow * nb >= GEMM_PAR_WORK:
        _images_nchw_few(x, wm, out, cols, geo, parts)
        return
    few_each(x, wm, out, cols, geo, parts)


@njit(nogil=True, inline="always")
def few_each(x, wm, out, cols, geo, parts):
    """`conv2d_nchw_few` image by image, each product split between `parts` threads."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    nb, oc, oh, ow = out.shape
    for n in range(nb):
        im2col_nchw(x[n], cols[0], kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)
        gemm(wm, cols[0], out[n].reshape((oc, oh * ow)), parts)


@njit(nogil=True, parallel=True, link=False)
def _images_1x1_nchw(x, wm, out, parts):
    nb, ch, h, w = x.shape
    for t in prange(parts):
        for n in range(t, nb, parts):
            gemm(wm, x[n].reshape((ch, h * w)), out[n].reshape((wm.shape[0], h * w)), 1)


@njit(nogil=True)
def conv1x1_nchw(x, wm, out, parts):
    """A 1x1, stride-1, unpadded convolution: one product per image."""
    nb, ch, h, w = x.shape
    if parts > 1 and nb >= parts and wm.size * h * w * nb >= GEMM_PAR_WORK:
        _images_1x1_nchw(x, wm, out, parts)
        return
    conv1x1_each(x, wm, out, parts)


@njit(nogil=True, inline="always")
def conv1x1_each(x, wm, out, parts):
    """`conv1x1_nchw` image by image, each product split between `parts` threads."""
    nb, ch, h, w = x.shape
    for n in range(nb):
        gemm(wm, x[n].reshape((ch, h * w)), out[n].reshape((wm.shape[0], h * w)), parts)


@njit(nogil=True, parallel=True, link=False)
def _images_nhwc(x, wp, out, cols, geo, parts):
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    nb, oh, ow, oc = out.shape
    for t in prange(parts):
        for n in range(t, nb, parts):
            im2col_nhwc(x[n], cols[t], kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, 0)
            gemm(cols[t], wp, out[n].reshape((oh * ow, oc)), 1)


@njit(nogil=True)
def conv2d_nhwc(x, wp, out, cols, geo, parts):
    """out [N, OH, OW, OC] = conv(x [N, H, W, C], wp [KH*KW*C, OC]); cols: scratch
    [threads, OH*OW, KH*KW*C]."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    nb, oh, ow, oc = out.shape
    parts = min(parts, cols.shape[0])
    if parts > 1 and nb >= parts and wp.size * oh * ow * nb >= GEMM_PAR_WORK:
        _images_nhwc(x, wp, out, cols, geo, parts)
        return
    for n in range(nb):
        im2col_nhwc(x[n], cols[0], kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, 0)
        gemm(cols[0], wp, out[n].reshape((oh * ow, oc)), parts)


@njit(nogil=True)
def conv1x1_nhwc(x, wp, out, parts):
    nb, h, w, ch = x.shape
    gemm(x.reshape((nb * h * w, ch)), wp, out.reshape((nb * h * w, wp.shape[1])), parts)


@njit(nogil=True, fastmath=True)
def pad_plane(xp, pad, ph, pw):
    """pad [H + 2ph, W + 2pw] = the plane xp [H, W] inside a zero border."""
    h, w = xp.shape
    pad[:ph] = 0
    pad[ph + h:] = 0
    for i in range(h):
        row = pad[ph + i]
        row[:pw] = 0
        row[pw + w:] = 0
        for j in range(w):
            row[pw + j] = xp[i, j]


@njit(nogil=True, fastmath=True)
def _dw_planes(x, wd, out, q0, q1, geo):
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    nb, ch, h, w = x.shape
    oh, ow = out.shape[2], out.shape[3]
    for q in range(q0, q1):
        n, c = q // ch, q % ch
        for i in range(oh):
            for j in range(ow):
                out[n, c, i, j] = 0
            for a in range(kh):
                hh = i * sh - ph + a * dh
                if hh < 0 or hh >= h:
                    continue
                for b in range(kw):
                    j0, j1 = _span(ow, w, b * dw, sw, pw)
                    wv = wd[c, a * kw + b]
                    off = b * dw - pw
                    for j in range(j0, j1):
                        out[n, c, i, j] += x[n, c, hh, j * sw + off] * wv


@njit(nogil=True, parallel=True, link=False)
def _dw_planes_parallel(x, wd, out, geo, parts):
    nq = x.shape[0] * x.shape[1]
    step = (nq + parts - 1) // parts
    for t in prange(parts):
        _dw_planes(x, wd, out, min(nq, t * step), min(nq, (t + 1) * step), geo)


@njit(nogil=True)
def depthwise_nchw(x, wd, out, geo, parts):
    """Depthwise convolution, x [N, C, H, W], wd [C, KH*KW]."""
    if parts > 1 and out.size * wd.shape[1] >= GEMM_PAR_WORK:
        _dw_planes_parallel(x, wd, out, geo, parts)
    else:
        _dw_planes(x, wd, out, 0, x.shape[0] * x.shape[1], geo)


@njit(nogil=True, fastmath=True)
def _dw_rows(x, wd, out, q0, q1, geo):
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    nb, h, w, ch = x.shape
    oh, ow = out.shape[1], out.shape[2]
    for q in range(q0, q1):
        n, i = q // oh, q % oh
        for j in range(ow):
            for c in range(ch):
                out[n, i, j, c] = 0
            for a in range(kh):
                hh = i * sh - ph + a * dh
                if hh < 0 or hh >= h:
                    continue
                for b in range(kw):
                    ww = j * sw - pw + b * dw
                    if 0 <= ww < w:
                        for c in range(ch):
                            out[n, i, j, c] += x[n, hh, ww, c] * wd[a, b, c]


@njit(nogil=True, parallel=True, link=False)
def _dw_rows_parallel(x, wd, out, geo, parts):
    nq = out.shape[0] * out.shape[1]
    step = (nq + parts - 1) // parts
    for t in prange(parts):
        _dw_rows(x, wd, out, min(nq, t * step), min(nq, (t + 1) * step), geo)


@njit(nogil=True)
def depthwise_nhwc(x, wd, out, geo, parts):
    """Depthwise convolution, x [N, H, W, C], wd [KH, KW, C]."""
    if parts > 1 and out.size * wd.shape[0] * wd.shape[1] >= GEMM_PAR_WORK:
        _dw_rows_parallel(x, wd, out, geo, parts)
    else:
        _dw_rows(x, wd, out, 0, out.shape[0] * out.shape[1], geo)
