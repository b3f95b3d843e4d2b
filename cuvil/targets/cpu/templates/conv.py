"""The convolution template: conv2d + elementwise epilogue, in NCHW or NHWC.

The convolution itself is a call of a driver in `cuvil.targets.cpu.kernels.conv` or `.conv_direct`
(an f32 NCHW convolution straight from a register tile, or as Winograd's F(2x2, 3x3) for a
3x3 with enough channels, `.winograd`; im2col + BLAS per image otherwise,
a single product for 1x1 NHWC, direct loops for NHWC depthwise), compiled once per
installation (which one, and its arranged weight and scratch: `conv_drivers.driver`); the
generated kernel passes the geometry and applies the group's epilogue.
A depthwise NCHW convolution is written out whole by `depthwise`, epilogue fused.
A constant weight is arranged for the driver at compile time. A weight known only at the
call (a training graph's parameter) is arranged at each call, on the drivers of `COMPUTED`
only: by the driver's `_raw` form (`kernels.conv_raw`) where the epilogue is the common
one, else by the generated kernel's first line (`Driver.runtime`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from cuvil.ir.types import NHWC
from cuvil.lower.physical import layout_perm
from cuvil.lower.spec import THREADS, KernelSpec, Scratch, Unsupported
from cuvil.ops.nn import pair
from cuvil.targets.cpu.templates import depthwise
from cuvil.targets.cpu.templates.conv_drivers import (
    DIRECT_MIN_ROW,
    Driver,
    direct_row,
    driver,
    geometry,
    planned_scratch,
    weight_rows,
)
from cuvil.targets.cpu.templates.elementwise import ExprBuilder
from cuvil.targets.cpu.templates.gemm import BLAS_DTYPES, epilogue, split_heavy
from cuvil.targets.cpu.templates.loops import NotPlain, indent, plain_loads
from cuvil.targets.cpu.templates.post import geometry_arg, match, post_args

PAR_WORK = 1 << 20  # multiply-adds below which one image at a time, BLAS split, is faster
POOLED = {f"conv2d_nchw_{kind}_post": f"conv2d_nchw_{kind}_pool_post"  # with a max pool
          for kind in ("direct", "winograd")}
# The drivers a computed weight runs on: those measured faster than torch's at training
# sizes (ResNet-18 at batch 32, two threads: the 7x7/2 stem 3.7 against 10.9 ms, Winograd
# on 64 channels of 16x16 1.9 against 3.2). The rest lose (im2col per image on 512
# channels of 2x2 37 ms against 2.9; the direct tile on rows of 8 2.8 against 2.1: it
# takes rows of `DIRECT_MIN_ROW` or more only) or tie.
COMPUTED = ("conv2d_nchw_winograd_post", "conv2d_nchw_few_post", "conv2d_nchw_direct_post")


def logical(ctx, value: str, then: Callable[[np.ndarray], np.ndarray] = lambda a: a):
    """The function of constant `value`'s physical array that gives `then` of its logical
    one (`ctx.prepare_from`'s recipe)."""
    perm = layout_perm(ctx.type(value))
    inverse = [perm.index(d) for d in range(len(perm))]
    return lambda array: then(array.transpose(inverse))


def generate(group, ctx) -> KernelSpec:
    conv, rest = split_heavy(group, ctx, ("conv2d",))
    x = ctx.type(conv.inputs[0])
    if x.dtype not in BLAS_DTYPES:
        raise Unsupported(f"conv2d in {x.dtype}")
    if not ctx.is_const(conv.inputs[1]):
        return _computed_weight(group, conv, rest, ctx)
    if depthwise.applies(conv, ctx) and depthwise.fusable(conv, rest, ctx):
        arranged = ctx.prepare_from(f"{conv.inputs[1]}.nchw.depthwise",
                                    logical(ctx, conv.inputs[1], weight_rows), conv.inputs[1])
        geo = geometry(conv, ctx)
        return depthwise.library(group, conv, rest, ctx, arranged, geo) or \
            depthwise.generate(group, conv, rest, ctx, arranged, geo)
    drv = driver(conv, ctx)
    layout = "nhwc" if x.layout == NHWC else "nchw"
    arranged = ctx.prepare_from(f"{conv.inputs[1]}.{layout}.{drv.note}",
                                logical(ctx, conv.inputs[1], drv.pack), conv.inputs[1])
    if rest and rest[-1].op == "max_pool2d":
        return _pooled(drv, conv, rest, ctx, group.output, arranged)
    params = ["x0", "x1", *drv.scratch.values(), "threads"]
    args = [conv.inputs[0], arranged, *drv.scratch, THREADS]
    post = _library(drv, conv, rest, ctx, group.output, arranged) if drv.library else None
    if post is not None:
        return post
    return _generated(drv, group, conv, rest, ctx, params, args, f"{layout.upper()}, ")


def _generated(drv: Driver, group, conv, rest, ctx, params: list[str], args: list[str],
               note: str, head: tuple[str, ...] = ()) -> KernelSpec:
    """The kernel as generated code: `head`, the driver's call, the epilogue."""
    out = ctx.type(group.output)
    e_params, e_args, e_lines, parallel = epilogue(ctx, rest, out, conv.name, len(params))
    body, note = [drv.call] + e_lines, note + drv.note
    per_image = _per_image(drv, ctx, rest, out, conv.name, len(params)) if rest else None
    if per_image is not None:  # each image's epilogue while its output is in cache
        (body, parallel), note = per_image, f"{note}, epilogue per image"
    # a variable, not a literal in each call: a tuple literal inside a `prange` made the
    # per-image kernel 30% slower (137 against 106 us)
    return KernelSpec("conv", [*params, *e_params, "out"], [*args, *e_args, group.output],
                      [f"geo = {geometry(conv, ctx)}", *head, *body], parallel=parallel,
                      scratch={name: ctx.scratch[name] for name in drv.scratch}, note=note)


def _computed_weight(group, conv, rest, ctx) -> KernelSpec:
    """A convolution whose weight is a value of the graph (a parameter of a training
    graph), arranged for the driver each call (cheap next to the convolution: a copy of
    the weight, or Winograd's transform of it): by the library driver's `_raw` form where
    the epilogue is the common one, else by the generated kernel's first line."""
    x, w = ctx.type(conv.inputs[0]), ctx.type(conv.inputs[1])
    if list(layout_perm(w)) != list(range(4)) or not all(isinstance(d, int) for d in w.shape):
        raise Unsupported("conv2d with a computed weight not in OIHW order of static sizes")
    if depthwise.applies(conv, ctx) or (rest and rest[-1].op == "max_pool2d"):
        raise Unsupported("conv2d with a computed weight, depthwise or pooled")
    drv = driver(conv, ctx)
    oh, ow = conv.type.shape[2:]
    if drv.library not in COMPUTED or (drv.note == "direct" and direct_row(
            geometry(conv, ctx), x.shape[3], oh, ow) < DIRECT_MIN_ROW):
        raise Unsupported(f"conv2d with a computed weight on {drv.note} ({ow} columns): "
                          "slower than torch's")
    post = _library(drv, conv, rest, ctx, group.output, conv.inputs[1], "_raw")
    if post is not None:
        return post
    params = ["x0", "w0", *drv.scratch.values(), "threads"]
    args = [conv.inputs[0], conv.inputs[1], *drv.scratch, THREADS]
    return _generated(drv, group, conv, rest, ctx, params, args,
                      "NCHW, weight arranged each call, ", (f"x1 = {drv.runtime}",))


def _library(drv: Driver, conv, rest, ctx, output: str, weight: str,
             suffix: str = "") -> KernelSpec | None:
    """The kernel as `drv.library` itself, when the epilogue is the common one
    (`templates.post`): nothing to generate, nothing to compile but once per installation.
    With `suffix` "_raw", its `kernels.conv_raw` form, which takes the logical weight."""
    out = ctx.type(output)
    post = match(ctx, conv.name, rest, out, 1, computed=bool(suffix)) \
        if list(layout_perm(out)) == list(range(4)) else None
    if post is None or post.gelu or out.dtype != ctx.type(conv.inputs[0]).dtype:
        return None
    bias, res, clip = post_args(ctx, post, out)
    geo = geometry_arg(ctx, geometry(conv, ctx))
    params = ["x", "w", *drv.scratch.values(), "bias", "res", "clip", "geo", "parts", "out"]
    args = [conv.inputs[0], weight, *drv.scratch, bias, res, clip, geo, THREADS, output]
    return KernelSpec("conv", params, args, [], scratch={name: ctx.scratch[name] for name in
                                                        drv.scratch},
                      note=f"NCHW, {drv.note}, epilogue {post.describe()}",
                      library=drv.library + suffix)


def _pooled(drv: Driver, conv, rest, ctx, output: str, weight: str) -> KernelSpec:
    """A convolution whose epilogue ends in a max pool (`conv2d_bias_relu_max_pool`):
    `conv_post.conv2d_nchw_direct_pool_post` (or `_winograd_pool_post`), each image
    convolved into a thread's scratch and pooled from there. Only on those drivers, with
    the common epilogue before the pool, no dilation or ceil_mode; otherwise Unsupported,
    and lowering splits the pool off (`compile._split`)."""
    pool, inner = rest[-1], ctx.type(rest[-1].inputs[0])
    a = pool.attrs
    plain = pair(a["dilation"]) == (1, 1) and not a["ceil_mode"]
    post = match(ctx, conv.name, rest[:-1], inner, 1) if plain and \
        drv.library in POOLED and list(layout_perm(inner)) == list(range(4)) else None
    if post is None or post.gelu or inner.dtype != ctx.type(conv.inputs[0]).dtype:
        raise Unsupported("a max pool in a convolution's epilogue needs the direct or "
                          "Winograd NCHW driver, the common epilogue, no dilation and no "
                          "ceil_mode")
    bias, res, clip = post_args(ctx, post, inner)
    kernel = pair(a["kernel_size"])
    window = kernel + pair(a["stride"] or kernel) + pair(a["padding"])  # kh kw sh sw ph pw
    windows = ctx.prepare(f"pool.{'.'.join(map(str, window))}", np.array(window, np.int64))
    scratch = {**drv.scratch, **planned_scratch(ctx, conv, {"ys": Scratch.rows(inner.dtype,
                                                                         *inner.shape[1:])})}
    params = ["x", "w", *scratch.values(), "bias", "res", "clip", "geo", "pool", "parts", "out"]
    args = [conv.inputs[0], weight, *scratch, bias, res, clip,
            geometry_arg(ctx, geometry(conv, ctx)), windows, THREADS, output]
    return KernelSpec("conv", params, args, [], scratch={name: ctx.scratch[name] for name in
                                                        scratch},
                      note=f"NCHW, {drv.note}, epilogue {post.describe()} + max pool "
                           f"{kernel[0]}x{kernel[1]}", library=POOLED[drv.library])


def _per_image(drv: Driver, ctx, rest, out, seed: str,
               first_arg: int) -> tuple[list[str], bool] | None:
    """The kernel body that applies each image's epilogue right after its product, and
    whether it is parallel; or None.

    On one thread, a plain loop over images (a whole batch's output and epilogue would
    leave the cache: MobileNet's 16 -> 64 1x1 took 1.1 ms so).

    With enough images and work (`split`), threads take images: each computes its images'
    products and epilogues. Otherwise the driver computes the whole batch (splitting each
    product between threads), then threads take channels of each image's epilogue. One
    `prange` serves both: every parallel loop costs Numba ~1 s more to compile.
    """
    serial = ctx.threads == 1
    if not drv.image or not (serial or ctx.worth_parallel(out.shape)) or \
            list(layout_perm(out)) != list(range(4)):
        return None
    expr = ExprBuilder(ctx, out, {seed: "acc"}, first_arg).build(rest)
    try:
        loads = plain_loads(expr, ("n", "c", "i", "j"))
    except NotPlain:
        return None
    element = ["acc = out[n, c, i, j]", *expr.body(loads, "out[n, c, i, j]")]
    if serial:
        return ["t = 0", "for n in range(x0.shape[0]):", f"    {drv.image}",
                "    for c in range(out.shape[1]):", "        for i in range(out.shape[2]):",
                "            for j in range(out.shape[3]):", *indent(element, 4)], False
    return _parallel_images(drv, element), True


def _parallel_images(drv: Driver, element: list[str]) -> list[str]:
    """`_per_image`'s parallel body: images or channels split between threads."""
    rows = drv.scratch and f"min(threads, {next(iter(drv.scratch.values()))}.shape[0])"
    return [f"parts = max(1, {rows or 'threads'})", "nb = x0.shape[0]",
            f"split = parts > 1 and nb >= parts and x1.size * out.shape[2] * out.shape[3] * "
            f"nb >= {PAR_WORK}",
            "if not split:", f"    {drv.call}",
            "for t in prange(parts):",
            "    n0 = t if split else 0", "    n_step = parts if split else 1",
            "    c0 = 0 if split else t", "    c_step = 1 if split else parts",
            "    for n in range(n0, nb, n_step):",
            "        if split:", f"            {drv.image}",
            "        for c in range(c0, out.shape[1], c_step):",
            "            for i in range(out.shape[2]):",
            "                for j in range(out.shape[3]):", *indent(element, 5)]
