"""CUDA convolution as an implicit GEMM: output pixels x output channels, the depth over
input channel x kernel row x kernel column, both operand slices staged in shared memory.

The product's rows are the output's pixels (image, row, column; a pooled output's when a
max pool follows), its columns the output channels, its depth `C * KH * KW`: a block's
threads gather the `bm x bk` slice of input patches (zeros in the padding, past the
image and past the tile's edges) and the `bk x bn` slice of the OIHW weight into shared
memory together, then each accumulates its register block (`tiling.staged_product`; the
tile is the cost model's choice for the problem's shape, `tiling.choose_tile`). The
group's epilogue runs on each element before the store. A max pool after it computes,
for each offset of the pool's window in turn, the product at the convolution pixels that
offset reaches, and keeps each pooled element's maximum of the epilogue's values.

It covers `groups == 1` with a static output size but for the batch (`covers`), NCHW or
NHWC; `conv.generate` computes the rest (grouped and depthwise convolutions) directly.
"""

from __future__ import annotations

from cuvil.ir.types import NHWC
from cuvil.lower.physical import layout_perm, np_name
from cuvil.lower.spec import KernelSpec
from cuvil.targets.cpu.templates.conv_drivers import geometry
from cuvil.targets.cpu.templates.elementwise import literal
from cuvil.targets.cpu.templates.pool import _geometry
from cuvil.targets.cuda import PARAMS
from cuvil.targets.cuda.templates import tiling, widen
from cuvil.targets.cuda.templates.elementwise import (
    device_text,
    element,
    epilogue,
    epilogue_value,
    output_indices,
)
from cuvil.targets.cuda.templates.tiling import Tile, each_owned, shared_arrays, staged_product


def covers(conv, out) -> bool:
    """Whether the implicit GEMM computes this convolution (see the module docstring)."""
    return conv.attrs["groups"] == 1 and all(
        isinstance(d, int) for t in (conv.type, out) for d in t.shape[1:])


def generate(conv, rest, pool, group_output: str, ctx, inputs=None) -> KernelSpec:
    """The kernel of `conv`, its epilogue `rest` and the max pool `pool` (or None) after
    it, writing `group_output`; `inputs`: the arrays it reads for `conv`'s (an f16 value
    for a widening cast, `widen`)."""
    inputs = list(inputs or conv.inputs)
    x, w = (ctx.type(i) for i in inputs)
    out, channels = ctx.type(group_output), conv.type.shape[1]
    depth = w.shape[1] * w.shape[2] * w.shape[3]
    problem = (1, x.shape[0] * out.shape[2] * out.shape[3], channels, depth)
    tile = tiling.choose_tile(PARAMS, problem, conv.type.dtype.itemsize)
    if pool is None:
        params, args, store = epilogue(ctx, conv.name, rest, out, output_indices(out), 2)
        head, tail = [], _product(conv, ctx, tile, out) + each_owned(tile, _owned(out, store))
    else:
        params, args, (head, tail) = _pooled(ctx, conv, rest, pool, tile, out)
    body = [*shared_arrays(tile, np_name(conv.type.dtype)), *head,
            f"m = x0.shape[0] * {out.shape[2] * out.shape[3]}", f"k = {depth}",
            f"n = {channels}", f"tiles_n = {-(-channels // tile.bn)}",
            f"tiles_m = (m + {tile.bm - 1}) // {tile.bm}", "t = cuda.blockIdx.x",
            "while t < tiles_m * tiles_n:", f"    r0 = (t // tiles_n) * {tile.bm}",
            f"    c0 = (t % tiles_n) * {tile.bn}", *["    " + ln for ln in tail],
            "    t += cuda.gridDim.x"]
    ops = [n.op for n in [*rest, *([pool] if pool else [])]]
    note = f"implicit GEMM {tile}" + (f" + {', '.join(ops)}" if ops else "")
    return KernelSpec("conv", ["x0", "x1", *params, "out"], [*inputs, *args, group_output],
                      device_text(body), parallel=False, fastmath="fast", note=note,
                      launch=tile.launch())


def _owned(out, inner: list[str]) -> list[str]:
    """`inner` at an owned element inside the output: its logical index set from `row`
    (image, row, column) and `col` (channel)."""
    n, c, i, j = (output_indices(out)[1][d] for d in range(4))
    h, w = out.shape[2], out.shape[3]
    return ["if row < m and col < n:",
            *["    " + ln for ln in [f"{n} = row // {h * w}", f"{c} = col",
                                     f"{i} = (row // {w}) % {h}", f"{j} = row % {w}",
                                     *inner]]]


def _product(conv, ctx, tile: Tile, out, pool=None) -> list[str]:
    """The staged product of the tile: a row's pixel at (`pi`, `pj`), the window's offset
    (`pa`, `pb`) away from the pooled pixel's corner when `pool` follows."""
    kh, kw, sh, sw, ph, pw, dh, dw = geometry(conv, ctx)
    nhwc = ctx.type(conv.inputs[0]).layout == NHWC
    h, w = ("x0.shape[1]", "x0.shape[2]") if nhwc else ("x0.shape[2]", "x0.shape[3]")
    oh, ow = conv.type.shape[2], conv.type.shape[3]
    gh, gw = out.shape[2], out.shape[3]
    pixel = ["ra = r0 + ar", f"an = ra // {gh * gw}", f"pi = (ra // {gw}) % {gh}",
             f"pj = ra % {gw}"]
    if pool is not None:
        pixel += _window_offset(pool)
    pixel += [f"ic = kk // {kh * kw}", f"hh = pi * {sh} - {ph} + ((kk // {kw}) % {kh}) * {dh}",
              f"ww = pj * {sw} - {pw} + (kk % {kw}) * {dw}",
              f"ok = ra < m and kk < k and hh >= 0 and hh < {h} and ww >= 0 and ww < {w}"
              + (f" and pi >= 0 and pi < {oh} and pj >= 0 and pj < {ow}" if pool else "")]
    x_at = widen.load("x0[an, hh, ww, ic]" if nhwc else "x0[an, ic, hh, ww]",
                      widen.is_widened(ctx, conv.inputs[0]), conv.type.dtype)
    w_at = widen.load(f"x1[c0 + bc, kk // {kh * kw}, (kk // {kw}) % {kh}, kk % {kw}]",
                      widen.is_widened(ctx, conv.inputs[1]), conv.type.dtype)
    return staged_product(tile, np_name(conv.type.dtype), (pixel, x_at),
                          (["ok = kk < k and c0 + bc < n"], w_at))


def _window_offset(pool) -> list[str]:
    """Lines moving (`pi`, `pj`) from a pooled pixel to the convolution pixel at the pool
    window's offset (`pa`, `pb`)."""
    kh, kw, sh, sw, ph, pw, dh, dw = _geometry(pool)
    return [f"pi = pi * {sh} - {ph} + pa * {dh}", f"pj = pj * {sw} - {pw} + pb * {dw}"]


def _pooled(ctx, conv, rest, pool, tile: Tile, out) -> tuple[list[str], list[str], tuple]:
    """(params, args, (lines declaring `best`, lines of a tile)) of a pooled tile: for each
    window offset the product, then each owned element's epilogue value folded into its
    maximum `best`, stored at the end."""
    kh, kw, sh, sw, ph, pw, dh, dw = _geometry(pool)
    pre = ctx.type(pool.inputs[0])
    n, c, i, j = (output_indices(out)[1][d] for d in range(4))
    at = {0: n, 1: c, 2: "ci", 3: "cj"}
    params, args, value = epilogue_value(ctx, conv.name, rest, pre,
                                         ([at[d] for d in layout_perm(pre)], at), 2)
    fold = [f"ci = {i} * {sh} - {ph} + pa * {dh}", f"cj = {j} * {sw} - {pw} + pb * {dw}",
            f"if ci >= 0 and ci < {pre.shape[2]} and cj >= 0 and cj < {pre.shape[3]}:",
            *["    " + ln for ln in [*value, "best[mi, nj] = vmaximum(value, best[mi, nj])"]]]
    window = [*_product(conv, ctx, tile, out, pool), *each_owned(tile, _owned(out, fold))]
    lines = [f"for mi in range({tile.tm}):", f"    for nj in range({tile.tn}):",
             f"        best[mi, nj] = {literal(float('-inf'), pre.dtype)}",
             f"for pa in range({kh}):", f"    for pb in range({kw}):",
             *["        " + ln for ln in window],
             *each_owned(tile, _owned(out, [f"{element('out', output_indices(out)[0])} = "
                                            "best[mi, nj]"]))]
    best = f"best = cuda.local.array(({tile.tm}, {tile.tn}), {np_name(pre.dtype)})"
    return params, args, ([best], lines)
