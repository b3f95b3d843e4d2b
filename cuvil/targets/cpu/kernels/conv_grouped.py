"""Grouped convolution drivers: `groups` independent convolutions side by side, each
reading its own slice of the input channels and writing its own slice of the outputs
(RegNet's and ResNeXt's 3x3 convolutions, 2 to 64 groups; one input channel per group is
`conv.depthwise_*`).

The work is split into units of (image, group), so a single image still keeps every
thread busy; each unit is im2col of its channel slice and one product with its slice of
the weight, on its thread's scratch.

* `conv2d_nchw_grouped`: weight as [G, OC/G, C/G*KH*KW]; `cols [C/G*KH*KW, OH*OW]`;
  the product lands in the unit's output planes directly.
* `conv2d_nhwc_grouped`: weight as [G, KH*KW*C/G, OC/G]; `cols [OH*OW, KH*KW*C/G]`,
  the product in `tmp [OH*OW, OC/G]`, then scattered to the group's channels.
"""

from __future__ import annotations

from numba import prange

from cuvil.runtime.numba_cache import njit
from cuvil.targets.cpu.kernels.blas import GEMM_PAR_WORK, gemm
from cuvil.targets.cpu.kernels.conv import im2col_nchw, im2col_nhwc


@njit(nogil=True)
def _nchw_unit(x, wg, out, cols, geo, u):
    """Unit `u` (image u // G, group u % G) of `conv2d_nchw_grouped`."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    nb, oc, oh, ow = out.shape
    groups, ocg = wg.shape[0], wg.shape[1]
    n, g = u // groups, u % groups
    _, ch, h, w = x.shape
    cg = ch // groups
    xg = x[n].reshape((groups, cg, h, w))[g]
    im2col_nchw(xg, cols, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)
    gemm(wg[g], cols, out[n].reshape((groups, ocg, oh * ow))[g], 1)


@njit(nogil=True, parallel=True, link=False)
def _units_nchw(x, wg, out, cols, geo, units, parts):
    for t in prange(parts):
        for u in range(t, units, parts):
            _nchw_unit(x, wg, out, cols[t], geo, u)


@njit(nogil=True)
def conv2d_nchw_grouped(x, wg, out, cols, geo, parts):
    """out [N, OC, OH, OW] = conv(x [N, C, H, W]) in wg.shape[0] groups; wg [G, OC/G,
    C/G*KH*KW]; scratch cols [threads, C/G*KH*KW, OH*OW]."""
    units = out.shape[0] * wg.shape[0]
    parts = min(parts, cols.shape[0], units)
    if parts > 1 and wg.size * out.shape[2] * out.shape[3] * out.shape[0] >= GEMM_PAR_WORK:
        _units_nchw(x, wg, out, cols, geo, units, parts)
        return
    for u in range(units):
        _nchw_unit(x, wg, out, cols[0], geo, u)


@njit(nogil=True)
def _nhwc_unit(x, wg, out, cols, tmp, geo, u):
    """Unit `u` (image u // G, group u % G) of `conv2d_nhwc_grouped`."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    nb, oh, ow, oc = out.shape
    groups, ocg = wg.shape[0], wg.shape[2]
    n, g = u // groups, u % groups
    _, h, w, ch = x.shape
    cg = ch // groups
    xg = x[n].reshape((h, w, groups, cg))[:, :, g, :]
    im2col_nhwc(xg, cols, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, 0)
    gemm(cols, wg[g], tmp, 1)
    og = out[n].reshape((oh * ow, groups, ocg))
    for p in range(oh * ow):
        for k in range(ocg):
            og[p, g, k] = tmp[p, k]


@njit(nogil=True, parallel=True, link=False)
def _units_nhwc(x, wg, out, cols, tmp, geo, units, parts):
    for t in prange(parts):
        for u in range(t, units, parts):
            _nhwc_unit(x, wg, out, cols[t], tmp[t], geo, u)


@njit(nogil=True)
def conv2d_nhwc_grouped(x, wg, out, cols, tmp, geo, parts):
    """out [N, OH, OW, OC] = conv(x [N, H, W, C]) in wg.shape[0] groups; wg [G,
    KH*KW*C/G, OC/G]; scratch cols [threads, OH*OW, KH*KW*C/G], tmp [threads, OH*OW,
    OC/G]."""
    units = out.shape[0] * wg.shape[0]
    parts = min(parts, cols.shape[0], units)
    if parts > 1 and wg.size * out.shape[1] * out.shape[2] * out.shape[0] >= GEMM_PAR_WORK:
        _units_nhwc(x, wg, out, cols, tmp, geo, units, parts)
        return
    for u in range(units):
        _nhwc_unit(x, wg, out, cols[0], tmp[0], geo, u)
