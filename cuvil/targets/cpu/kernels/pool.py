"""The common NCHW poolings as calls compiled once per installation: global average
pooling, and max or average pooling whose windows all lie inside the image (no padding or
dilation: the usual 2x2 and 3x3 pools). A pool group of that kind *is* one of these, so
lowering generates and Numba compiles nothing for it; other pools (padding, dilation,
`ceil_mode` windows, NHWC, adaptive to more than 1x1) are generated (`templates.pool`).

Planes (image, channel) are split between threads when there are at least 4 and the
output has 4096 elements, as in a generated pool kernel. A 2x2 window of stride 2 has
its own loop (one expression per output pixel, which LLVM vectorizes; a generated kernel
writes out every window so); other windows loop over their taps. A max is NaN where its
window holds one, as torch's (`vmath.vmaximum`).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from cuvil.runtime.numba_cache import njit
from cuvil.targets.cpu.kernels.vmath import vmaximum

_OPTS = dict(nogil=True, error_model="numpy", fastmath={"nsz", "arcp", "contract", "afn",
                                                        "reassoc"})


@njit(inline="always", **_OPTS)
def _two_by_two(r0, r1, orow, is_max, inv):
    if is_max:
        for j in range(orow.shape[0]):
            orow[j] = vmaximum(vmaximum(r0[2 * j], r0[2 * j + 1]),
                               vmaximum(r1[2 * j], r1[2 * j + 1]))
    else:
        for j in range(orow.shape[0]):
            orow[j] = (r0[2 * j] + r0[2 * j + 1] + r1[2 * j] + r1[2 * j + 1]) * inv


@njit(inline="always", **_OPTS)
def window_planes(x, out, geo, is_max, q0, q1):
    """Planes q0..q1 of x [N*C, H, W] -> out [N*C, OH, OW] (every window inside)."""
    kh, kw, sh, sw = geo[0], geo[1], geo[2], geo[3]
    oh, ow = out.shape[1], out.shape[2]
    inv = out.dtype.type(1.0 / (kh * kw))
    for q in range(q0, q1):
        for i in range(oh):
            orow = out[q, i]
            if kh == 2 and kw == 2 and sh == 2 and sw == 2:
                _two_by_two(x[q, 2 * i], x[q, 2 * i + 1], orow, is_max, inv)
                continue
            for j in range(ow):
                orow[j] = out.dtype.type(-np.inf) if is_max else 0
            for a in range(kh):
                row = x[q, i * sh + a]
                for b in range(kw):
                    for j in range(ow):
                        v = row[j * sw + b]
                        orow[j] = vmaximum(v, orow[j]) if is_max else orow[j] + v
            if not is_max:
                for j in range(ow):
                    orow[j] *= inv


@njit(inline="always", **_OPTS)
def max_planes(x, out, geo, q0, q1):
    """Max pooling of planes q0..q1 of x [N*C, H, W] -> out [N*C, OH, OW], windows
    geo[0] x geo[1] at strides geo[2], geo[3], padded by geo[4] rows and geo[5] columns
    (the padding never wins: each window has a pixel inside, as torch requires)."""
    kh, kw, sh, sw, ph, pw = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5]
    if ph == 0 and pw == 0:
        window_planes(x, out, geo, True, q0, q1)
        return
    h, w, oh, ow = x.shape[1], x.shape[2], out.shape[1], out.shape[2]
    for q in range(q0, q1):
        for i in range(oh):
            orow = out[q, i]
            for j in range(ow):
                orow[j] = out.dtype.type(-np.inf)
            for a in range(max(0, ph - i * sh), min(kh, h + ph - i * sh)):
                row = x[q, i * sh - ph + a]
                for b in range(kw):
                    j0 = max(0, (pw - b + sw - 1) // sw)
                    for j in range(j0, min(ow, (w - 1 + pw - b) // sw + 1)):
                        orow[j] = vmaximum(row[j * sw - pw + b], orow[j])


@njit(parallel=True, link=False, **_OPTS)
def _two_by_two_split(x, out, is_max):
    inv = out.dtype.type(0.25)
    for q in prange(x.shape[0]):
        for i in range(out.shape[1]):
            _two_by_two(x[q, 2 * i], x[q, 2 * i + 1], out[q, i], is_max, inv)


@njit(parallel=True, link=False, **_OPTS)
def _window_split(x, out, geo, is_max):
    for q in prange(x.shape[0]):
        window_planes(x, out, geo, is_max, q, q + 1)


@njit(nogil=True)
def pool_inside_nchw(x, geo, parts, out):
    """Max (geo[4] = 1) or average pooling of x [N, C, H, W], windows geo[0] x geo[1] at
    strides geo[2], geo[3], every one inside the image."""
    nb, ch, h, w = x.shape
    xq = x.reshape((nb * ch, h, w))
    oq = out.reshape((nb * ch, out.shape[2], out.shape[3]))
    split = parts > 1 and nb * ch >= 4 and out.size >= 4096
    if split and geo[0] == 2 and geo[1] == 2 and geo[2] == 2 and geo[3] == 2:
        _two_by_two_split(xq, oq, geo[4] != 0)  # its own loop, as fast as a generated one
    elif split:
        _window_split(xq, oq, geo, geo[4] != 0)
    else:
        window_planes(xq, oq, geo, geo[4] != 0, 0, nb * ch)


@njit(**_OPTS)
def _means(x, o, q0, q1):
    inv = o.dtype.type(1.0) / o.dtype.type(x.shape[1])  # inf for an empty plane: NaN, as torch
    for q in range(q0, q1):
        row, s = x[q], o.dtype.type(0)
        for t in range(row.shape[0]):
            s += row[t]
        o[q] = s * inv


@njit(nogil=True, parallel=True, link=False)
def _means_split(x, o):
    for q in prange(x.shape[0]):
        _means(x, o, q, q + 1)


@njit(nogil=True)
def global_average_nchw(x, parts, out):
    """out [N, C, 1, 1] = the mean of each plane of x [N, C, H, W]."""
    nb, ch, h, w = x.shape
    xq, o = x.reshape((nb * ch, h * w)), out.reshape((nb * ch,))
    if parts > 1 and nb * ch >= 4 and out.size >= 4096:
        _means_split(xq, o)
    else:
        _means(xq, o, 0, nb * ch)
