"""NCHW convolutions ending in the common epilogue, `out = clip(conv(x) + bias + res)`, as
one call compiled once per installation: a conv group with that epilogue (a bias, a
residual add, ReLU or ReLU6: the stock `conv2d_bias*` ops) *is* one of these drivers, so
lowering generates and Numba compiles nothing for it (a generated per-image kernel took
1-4 s to compile, most of a block's cold compile).

Every driver takes, after its input, arranged weight and scratch (as `conv`/`conv_direct`'s
drivers): `bias` [OC], `res` (an array shaped like `out`, or empty for none), `clip`
[lo, hi] (ReLU: [0, inf], ReLU6: [0, 6], none: [-inf, inf]), `geo` (the geometry as
int64[8]), `parts` (the thread count), then `out`, last as in every kernel.

With at least as many images as threads, threads take images, each image's epilogue right
after its product while the output is in cache (MobileNet's 16 -> 64 1x1 + ReLU6: 1.1 ms
with the epilogue over the whole batch, 0.6 ms so); with fewer, the product is split
between threads, then the epilogue's planes; one thread goes image by image. Where the
direct convolution runs on its pixel tile (`conv_direct`), an image's epilogue is applied
in the tile's stores instead, while the sums are still in registers; on the Winograd
driver (`winograd`), in its output transform.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from cuvil.runtime.numba_cache import njit
from cuvil.targets.cpu.kernels.blas import GEMM_PAR_WORK
from cuvil.targets.cpu.kernels.conv import (
    conv1x1_each,
    conv1x1_nchw_image,
    conv2d_nchw_few_image,
    conv2d_nchw_image,
    few_each,
    nchw_each,
)
from cuvil.targets.cpu.kernels.conv_direct import direct_each, direct_image_planned, image_plan
from cuvil.targets.cpu.kernels.f32_tile import no_epilogue
from cuvil.targets.cpu.kernels.pool import max_planes
from cuvil.targets.cpu.kernels.winograd import band_offsets, winograd_alone, winograd_image

_FAST = {"nsz", "arcp", "contract", "afn", "reassoc"}  # no nnan/ninf: clip bounds are inf


@njit(nogil=True, inline="always")
def _geo(g):
    return g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]


@njit(nogil=True, inline="always")
def _parts(parts, rows, work):
    """Threads worth using: none past the scratch rows, one for a small product."""
    return min(parts, rows) if work >= GEMM_PAR_WORK else 1


@njit(nogil=True, fastmath=_FAST, error_model="numpy")
def _post(out, bias, res, clip, q0, q1):
    """Planes q0..q1 (q = n*OC + c) of out [N, OC, OH, OW] := clip(out + bias[c] + res).
    Rows of 2-d views, indexed from 0: a flat index from q*HW could be negative as far as
    Numba knows, and its wraparound check kept the loop scalar (6x slower)."""
    oc, hw = out.shape[1], out.shape[2] * out.shape[3]
    o = out.reshape((out.shape[0] * oc, hw))
    r = res.reshape((res.shape[0] * res.shape[1], hw))
    lo, hi = clip[0], clip[1]
    zero = out.dtype.type(0)
    for q in range(q0 if bias.size or r.shape[0] or lo != -np.inf or hi != np.inf else q1, q1):
        b, row = bias[q % oc] if bias.size else zero, o[q]
        if r.shape[0]:  # one pass: two (a bias, then a clip) cost the CNN's stem 10%
            add = r[q]
            for p in range(hw):
                row[p] = min(max(row[p] + b + add[p], lo), hi)
        else:
            for p in range(hw):
                row[p] = min(max(row[p] + b, lo), hi)


@njit(nogil=True, parallel=True, link=False)
def _post_split(out, bias, res, clip, parts):
    planes = out.shape[0] * out.shape[1]
    step = (planes + parts - 1) // parts
    for t in prange(parts):
        _post(out, bias, res, clip, min(planes, t * step), min(planes, (t + 1) * step))


@njit(nogil=True, inline="always")
def _image_epilogue(bias, res, clip, n, per):
    """The pixel tile's epilogue (`conv_direct`) for image n, `per` elements an image."""
    rf = res.reshape(res.size)
    lo, hi = np.float32(clip[0]), np.float32(clip[1])
    flags = (1 if bias.size else 0) + (2 if res.size else 0) + \
        (4 if lo > -np.inf or hi < np.inf else 0)
    return bias, rf[n * per:n * per + per] if res.size else rf, lo, hi, flags


@njit(nogil=True, link=False)
def _direct_image(x, wk, xs, bias, res, clip, geo, n, y, plan, zero):
    """Image n into y [OC, OH, OW] (out[n], or a thread's scratch) with its epilogue: in
    the tile's stores where the pixel tile computes it, else right after (while y is in
    cache). plan, zero: as `conv_direct.direct_image_planned`'s."""
    if not direct_image_planned(x[n], wk, y, xs, geo,
                                _image_epilogue(bias, res, clip, n, y.size), plan, zero):
        oc = y.shape[0]
        _post(y.reshape((1, oc, y.shape[1], y.shape[2])), bias, res[n:n + 1], clip, 0, oc)


@njit(nogil=True, parallel=True, link=False)
def _direct_images(x, wk, xs, bias, res, clip, geo, parts, out, ag, hq, wq, offs):
    for t in prange(parts):  # the plan in parts: a tuple holding an array cannot enter
        for n in range(t, x.shape[0], parts):  # a parallel loop
            _direct_image(x, wk, xs[t], bias, res, clip, geo, n, out[n], (ag, hq, wq, offs),
                          n == t)


@njit(nogil=True)
def conv2d_nchw_direct_post(x, wk, xs, bias, res, clip, geo, parts, out):
    """`conv_direct.conv2d_nchw_direct`, then the epilogue."""
    g, nb = _geo(geo), x.shape[0]
    parts = _parts(parts, xs.shape[0], wk.size * out.shape[2] * out.shape[3] * nb)
    if parts > 1 and nb >= parts:
        _direct_images(x, wk, xs, bias, res, clip, g, parts, out, *image_plan(x[0], g))
    elif parts > 1:
        direct_each(x, wk, out, xs, g, parts)
        _post_split(out, bias, res, clip, parts)
    else:
        plan = image_plan(x[0], g)
        for n in range(nb):
            _direct_image(x, wk, xs[0], bias, res, clip, g, n, out[n], plan, n == 0)


@njit(nogil=True, parallel=True, link=False)
def _winograd_images(x, u, xs, bias, res, clip, geo, parts, out, offs):
    per = out[0].size
    for t in prange(parts):
        for n in range(t, x.shape[0], parts):
            winograd_image(x[n], u, out[n], xs[t], geo, _image_epilogue(bias, res, clip, n, per),
                           offs, n == t)


@njit(nogil=True)
def conv2d_nchw_winograd_post(x, u, xs, bias, res, clip, geo, parts, out):
    """`winograd.conv2d_nchw_winograd`, the epilogue in its output transform."""
    g, nb, per = _geo(geo), x.shape[0], out[0].size
    parts = min(parts, xs.shape[0])
    offs = band_offsets(x.shape[1], out.shape[2], out.shape[3])
    if parts > 1 and nb >= parts:
        _winograd_images(x, u, xs, bias, res, clip, g, parts, out, offs)
        return
    for n in range(nb):  # fewer images than threads: each image's rows of tiles split
        winograd_alone(x[n], u, out[n], xs, g, _image_epilogue(bias, res, clip, n, per), parts,
                       offs, n == 0)


@njit(nogil=True, link=False)
def _pooled_image(x, wk, xs, y, bias, res, clip, geo, pool, n, out, plan, zero):
    """Image n convolved into y [OC, OH, OW] (a thread's scratch), then max-pooled from
    there into out[n] while y is in cache. Without a residual the epilogue runs after the
    pool, on a quarter of the values (2x2 windows): v -> clip(v + bias) never decreases,
    so the max of the window's results is the result of its max. plan, zero: as
    `conv_direct.direct_image_planned`'s."""
    oc = y.shape[0]
    if res.size:
        _direct_image(x, wk, xs, bias, res, clip, geo, n, y, plan, zero)
        max_planes(y, out[n], pool, 0, oc)
        return
    direct_image_planned(x[n], wk, y, xs, geo, no_epilogue(), plan, zero)
    max_planes(y, out[n], pool, 0, oc)
    _post(out, bias, res, clip, n * oc, n * oc + oc)


@njit(nogil=True, inline="always")
def _row(ys, t, oc):
    """Thread t's image of scratch [OC, OH, OW]: the first OC planes of its row of ys
    (lowering pads each row: `Scratch.rows`)."""
    return ys[t][:oc]


@njit(nogil=True, parallel=True, link=False)
def _pooled_images(x, wk, xs, ys, bias, res, clip, geo, pool, parts, out, ag, hq, wq, offs):
    for t in prange(parts):
        for n in range(t, x.shape[0], parts):
            _pooled_image(x, wk, xs[t], _row(ys, t, out.shape[1]), bias, res, clip, geo, pool,
                          n, out, (ag, hq, wq, offs), n == t)


@njit(nogil=True)
def conv2d_nchw_direct_pool_post(x, wk, xs, ys, bias, res, clip, geo, pool, parts, out):
    """`conv2d_nchw_direct_post`, then the max pool `pool` [kh, kw, sh, sw, ph, pw]
    (`pool.max_planes`) of each image's output, pooled from a thread's scratch
    ys [threads, OC+, OH, OW] (its first OC planes): the full-size output is never
    written."""
    g, nb, oc = _geo(geo), x.shape[0], out.shape[1]
    parts = _parts(parts, xs.shape[0], wk.size * ys.shape[2] * ys.shape[3] * nb)
    if parts > 1 and nb >= parts:
        _pooled_images(x, wk, xs, ys, bias, res, clip, g, pool, parts, out,
                       *image_plan(x[0], g))
        return
    y, plan = _row(ys, 0, oc), image_plan(x[0], g)
    each = _parts(parts, parts, wk.size * y.shape[1] * y.shape[2])  # one image's threads
    for n in range(nb):  # fewer images than threads: each image's product split
        if parts > 1:
            y4 = y.reshape((1, oc, y.shape[1], y.shape[2]))
            direct_each(x[n:n + 1], wk, y4, xs, g, each)
            _post_split(y4, bias, res[n:n + 1], clip, parts)
            max_planes(y, out[n], pool, 0, oc)
        else:
            _pooled_image(x, wk, xs[0], y, bias, res, clip, g, pool, n, out, plan, n == 0)


@njit(nogil=True, parallel=True, link=False)
def _winograd_pooled_images(x, u, xs, ys, bias, res, clip, geo, pool, parts, out, offs):
    oc = out.shape[1]
    for t in prange(parts):
        y = _row(ys, t, oc)
        for n in range(t, x.shape[0], parts):
            winograd_image(x[n], u, y, xs[t], geo, _image_epilogue(bias, res, clip, n, y.size),
                           offs, n == t)
            max_planes(y, out[n], pool, 0, oc)


@njit(nogil=True)
def conv2d_nchw_winograd_pool_post(x, u, xs, ys, bias, res, clip, geo, pool, parts, out):
    """`conv2d_nchw_winograd_post` into a thread's scratch ys [threads, OC+, OH, OW], then
    each image max-pooled from there (`conv2d_nchw_direct_pool_post`'s contract)."""
    g, nb, oc = _geo(geo), x.shape[0], out.shape[1]
    parts = min(parts, xs.shape[0])
    y = _row(ys, 0, oc)
    offs = band_offsets(x.shape[1], y.shape[1], y.shape[2])
    if parts > 1 and nb >= parts:
        _winograd_pooled_images(x, u, xs, ys, bias, res, clip, g, pool, parts, out, offs)
        return
    for n in range(nb):  # fewer images than threads: each image's rows of tiles split
        winograd_alone(x[n], u, y, xs, g, _image_epilogue(bias, res, clip, n, y.size), parts,
                       offs, n == 0)
        max_planes(y, out[n], pool, 0, oc)


@njit(nogil=True, parallel=True, link=False)
def _im2col_images(x, wp, cols, xt, tmp, bias, res, clip, geo, parts, out):
    oc = out.shape[1]
    for t in prange(parts):
        for n in range(t, x.shape[0], parts):
            conv2d_nchw_image(x[n], wp, out[n], cols[t], xt[t], tmp[t], geo)
            _post(out, bias, res, clip, n * oc, n * oc + oc)


@njit(nogil=True)
def conv2d_nchw_post(x, wp, cols, xt, tmp, bias, res, clip, geo, parts, out):
    """`conv.conv2d_nchw` (im2col through HWC, then a product), then the epilogue."""
    g, nb, oc = _geo(geo), x.shape[0], out.shape[1]
    parts = _parts(parts, cols.shape[0], wp.size * out.shape[2] * out.shape[3] * nb)
    if parts > 1 and nb >= parts:
        _im2col_images(x, wp, cols, xt, tmp, bias, res, clip, g, parts, out)
    elif parts > 1:
        nchw_each(x, wp, out, cols, xt, tmp, g)
        _post_split(out, bias, res, clip, parts)
    else:
        for n in range(nb):
            conv2d_nchw_image(x[n], wp, out[n], cols[0], xt[0], tmp[0], g)
            _post(out, bias, res, clip, n * oc, n * oc + oc)


@njit(nogil=True, parallel=True, link=False)
def _few_images(x, wm, cols, bias, res, clip, geo, parts, out):
    oc = out.shape[1]
    for t in prange(parts):
        for n in range(t, x.shape[0], parts):
            conv2d_nchw_few_image(x[n], wm, out[n], cols[t], geo)
            _post(out, bias, res, clip, n * oc, n * oc + oc)


@njit(nogil=True)
def conv2d_nchw_few_post(x, wm, cols, bias, res, clip, geo, parts, out):
    """`conv.conv2d_nchw_few` (few input channels), then the epilogue."""
    g, nb, oc = _geo(geo), x.shape[0], out.shape[1]
    parts = _parts(parts, cols.shape[0], wm.size * out.shape[2] * out.shape[3] * nb)
    if parts > 1 and nb >= parts:
        _few_images(x, wm, cols, bias, res, clip, g, parts, out)
    elif parts > 1:
        few_each(x, wm, out, cols, g, parts)
        _post_split(out, bias, res, clip, parts)
    else:
        for n in range(nb):
            conv2d_nchw_few_image(x[n], wm, out[n], cols[0], g)
            _post(out, bias, res, clip, n * oc, n * oc + oc)


@njit(nogil=True, parallel=True, link=False)
def _images_1x1(x, wm, bias, res, clip, parts, out):
    oc = out.shape[1]
    for t in prange(parts):
        for n in range(t, x.shape[0], parts):
            conv1x1_nchw_image(x[n], wm, out[n])
            _post(out, bias, res, clip, n * oc, n * oc + oc)


@njit(nogil=True)
def conv1x1_nchw_post(x, wm, bias, res, clip, geo, parts, out):
    """`conv.conv1x1_nchw` (1x1, stride 1, unpadded: a product per image), then the
    epilogue; `geo` is unused, passed like every driver's."""
    nb, oc = x.shape[0], out.shape[1]
    parts = _parts(parts, parts, wm.size * out.shape[2] * out.shape[3] * nb)
    if parts > 1 and nb >= parts:
        _images_1x1(x, wm, bias, res, clip, parts, out)
    elif parts > 1:
        conv1x1_each(x, wm, out, parts)
        _post_split(out, bias, res, clip, parts)
    else:
        for n in range(nb):
            conv1x1_nchw_image(x[n], wm, out[n])
            _post(out, bias, res, clip, n * oc, n * oc + oc)
