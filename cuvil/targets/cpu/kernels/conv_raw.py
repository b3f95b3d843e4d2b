"""`conv_post`'s drivers for a weight known only at the call (a training graph's
parameter): each arranges the logical weight [OC, C, KH, KW] as its driver takes it (what
`templates.conv` does once for a constant), then runs that driver. Compiled once per
installation like them, so such a convolution compiles nothing of its own (a generated
kernel took 1.4-9.5 s). The arrangement is a copy of the weight, or Winograd's transform.
The bias may be a value of the graph too, of any shape holding one value per channel
(`[OC, 1, 1]` as the stock rules write it): each takes it as a vector.
"""

from __future__ import annotations

import numpy as np

from cuvil.runtime.numba_cache import njit
from cuvil.targets.cpu.kernels.conv_post import (
    conv2d_nchw_direct_post,
    conv2d_nchw_few_post,
    conv2d_nchw_winograd_post,
)
from cuvil.targets.cpu.kernels.winograd import winograd_weight_of


@njit(nogil=True, inline="always")
def _vector(bias):
    return bias.reshape((bias.size,))


@njit(nogil=True)
def conv2d_nchw_direct_post_raw(x, w, xs, bias, res, clip, geo, parts, out):
    wk = np.ascontiguousarray(w.reshape((w.shape[0], -1)).T)
    conv2d_nchw_direct_post(x, wk, xs, _vector(bias), res, clip, geo, parts, out)


@njit(nogil=True)
def conv2d_nchw_winograd_post_raw(x, w, xs, bias, res, clip, geo, parts, out):
    conv2d_nchw_winograd_post(x, winograd_weight_of(w), xs, _vector(bias), res, clip, geo,
                              parts, out)


@njit(nogil=True)
def conv2d_nchw_few_post_raw(x, w, cols, bias, res, clip, geo, parts, out):
    conv2d_nchw_few_post(x, w.reshape((w.shape[0], -1)), cols, _vector(bias), res, clip, geo,
                         parts, out)

