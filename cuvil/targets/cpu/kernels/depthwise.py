"""Depthwise NCHW f32 convolution ending in a bias and a clip, `out = clip(dw(x) + bias)`,
as one call compiled once per installation: a depthwise group with that epilogue (the
stock `conv2d_bias_relu6` of a MobileNet block, or none) *is* `depthwise_nchw_post`, so
lowering generates and Numba compiles nothing for it. Square 3x3, 5x5 and 7x7 windows,
stride 1, no dilation, any padding; other depthwise convolutions are generated
(`templates.depthwise`).

Each channel plane is cut in strips of 32 columns (16 for planes up to 16 wide) that
`depthwise_tile` computes whole, border taps masked. Planes (image, channel) are split
between threads.

    depthwise_nchw_post(x [N, C, H, W], w [C, KH*KW], bias [C] or empty, clip [lo, hi],
                        geo int64[8], parts, out [N, C, OH, OW])
"""

from __future__ import annotations

from numba import prange

from cuvil.runtime.numba_cache import njit
from cuvil.targets.cpu.kernels.depthwise_tile import depthwise_strip

SIZES = (3, 5, 7)  # the square windows the strips are compiled for
PAR_WORK = 1 << 18  # multiply-adds below which one thread does every plane
_S3N1, _S3N2 = depthwise_strip(3, 3, 1), depthwise_strip(3, 3, 2)
_S5N1, _S5N2 = depthwise_strip(5, 5, 1), depthwise_strip(5, 5, 2)
_S7N1, _S7N2 = depthwise_strip(7, 7, 1), depthwise_strip(7, 7, 2)


@njit(nogil=True, inline="always")
def _strip(k, narrow, xf, plane, h, w, i0, j0, wf, w0, of, d0, ow, oh, cols, b, lo, hi):
    """The compiled strip for window k x k, one vector wide when `narrow`, else two."""
    if k == 3 and narrow:
        _S3N1(xf, plane, h, w, i0, j0, wf, w0, of, d0, ow, oh, cols, b, lo, hi)
    elif k == 3:
        _S3N2(xf, plane, h, w, i0, j0, wf, w0, of, d0, ow, oh, cols, b, lo, hi)
    elif k == 5 and narrow:
        _S5N1(xf, plane, h, w, i0, j0, wf, w0, of, d0, ow, oh, cols, b, lo, hi)
    elif k == 5:
        _S5N2(xf, plane, h, w, i0, j0, wf, w0, of, d0, ow, oh, cols, b, lo, hi)
    elif narrow:
        _S7N1(xf, plane, h, w, i0, j0, wf, w0, of, d0, ow, oh, cols, b, lo, hi)
    else:
        _S7N2(xf, plane, h, w, i0, j0, wf, w0, of, d0, ow, oh, cols, b, lo, hi)


@njit(nogil=True)
def _planes(x, wk, bias, clip, geo, out, q0, q1):
    """Planes q0..q1 (q = n*C + c) of the convolution, strip by strip."""
    k, ph, pw = geo[0], geo[4], geo[5]
    ch, h, w = x.shape[1], x.shape[2], x.shape[3]
    oh, ow = out.shape[2], out.shape[3]
    xf, of, wf = x.reshape(x.size), out.reshape(out.size), wk.reshape(wk.size)
    narrow = ow <= 16
    width = 16 if narrow else 32
    lo, hi = clip[0], clip[1]
    for q in range(q0, q1):
        c = q % ch
        b = bias[c] if bias.size else x.dtype.type(0)
        for j in range(0, ow, width):
            _strip(k, narrow, xf, q * h * w, h, w, -ph, j - pw, wf, c * k * k, of,
                   q * oh * ow + j, ow, oh, min(width, ow - j), b, lo, hi)


@njit(nogil=True, parallel=True, link=False)
def _split(x, wk, bias, clip, geo, out, parts):
    planes = x.shape[0] * x.shape[1]
    step = (planes + parts - 1) // parts
    for t in prange(parts):
        _planes(x, wk, bias, clip, geo, out, min(planes, t * step), min(planes, (t + 1) * step))


@njit(nogil=True)
def depthwise_nchw_post(x, wk, bias, clip, geo, parts, out):
    """out = clip(depthwise(x) + bias); see the module docstring."""
    k = geo[0]
    if geo[1] != k or k not in SIZES or geo[2] != 1 or geo[3] != 1 or geo[6] != 1 or \
            geo[7] != 1:
        raise ValueError("depthwise_nchw_post: a square 3x3, 5x5 or 7x7 window, stride 1, "
                         "no dilation")
    if wk.shape[0] != x.shape[1] or wk.shape[1] != k * k:
        raise ValueError("depthwise_nchw_post: the weight is not [C, KH*KW]")
    if parts > 1 and x.shape[0] * x.shape[1] > 1 and out.size * k * k >= PAR_WORK:
        _split(x, wk, bias, clip, geo, out, parts)
    else:
        _planes(x, wk, bias, clip, geo, out, 0, x.shape[0] * x.shape[1])
