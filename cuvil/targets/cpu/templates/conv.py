"""The convolution template: conv2d + elementwise epilogue, in NCHW or NHWC.

The convolution itself is a call of a driver in `cuvil.targets.cpu.kernels.conv` or `.conv_direct`
(an f32 NCHW convolution straight from a register tile, or as Winograd's F(2x2, 3x3) for a
3x3 with enough channels, `.winograd`; im2col + BLAS per image otherwise,
a single product for 1x1 NHWC, direct loops for NHWC depthwise), compiled once per
installation; the generated kernel passes the geometry and applies the group's epilogue.
A depthwise NCHW convolution is written out whole by `depthwise`, epilogue fused.
A constant weight is arranged for the driver at compile time. A weight known only at the
call (a training graph's parameter) is arranged at each call, on the drivers of `COMPUTED`
only: by the driver's `_raw` form (`kernels.conv_raw`) where the epilogue is the common
one, else by the generated kernel's first line (`Driver.runtime`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from cuvil.ir.types import NHWC, DType
from cuvil.lower.physical import layout_perm
from cuvil.lower.spec import THREADS, KernelSpec, Scratch, Unsupported
from cuvil.ops.nn import pair
from cuvil.targets.cpu.templates import depthwise
from cuvil.targets.cpu.templates.elementwise import ExprBuilder
from cuvil.targets.cpu.templates.gemm import BLAS_DTYPES, epilogue, split_heavy
from cuvil.targets.cpu.templates.loops import NotPlain, indent, plain_loads
from cuvil.targets.cpu.templates.post import geometry_arg, match, post_args

FEW_CHANNELS = 8  # below this, NCHW im2col copies plane rows rather than channel runs
PAR_WORK = 1 << 20  # multiply-adds below which one image at a time, BLAS split, is faster
DIRECT_MIN_ROW = 16  # output pixels per tile row below which the direct tile idles lanes
DIRECT_LINES = (5, 8)  # ...but rows this short go two to a vector (`runtime.f32_lines`)
WINOGRAD_MIN = (8, 16)  # channels in and out, output columns: below, the direct tile
POOLED = {f"conv2d_nchw_{kind}_post": f"conv2d_nchw_{kind}_pool_post"  # with a max pool
          for kind in ("direct", "winograd")}
# The drivers a computed weight runs on: those measured faster than torch's at training
# sizes (ResNet-18 at batch 32, two threads: the 7x7/2 stem 3.7 against 10.9 ms, Winograd
# on 64 channels of 16x16 1.9 against 3.2). The rest lose (im2col per image on 512
# channels of 2x2 37 ms against 2.9; the direct tile on rows of 8 2.8 against 2.1: it
# takes rows of `DIRECT_MIN_ROW` or more only) or tie.
COMPUTED = ("conv2d_nchw_winograd_post", "conv2d_nchw_few_post", "conv2d_nchw_direct_post")
WINOGRAD_G = np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]])  # F(2x2, 3x3)


def logical(ctx, value: str, then: Callable[[np.ndarray], np.ndarray] = lambda a: a):
    """The function of constant `value`'s physical array that gives `then` of its logical
    one (`ctx.prepare_from`'s recipe)."""
    perm = layout_perm(ctx.type(value))
    inverse = [perm.index(d) for d in range(len(perm))]
    return lambda array: then(array.transpose(inverse))


def _rows(weight: np.ndarray) -> np.ndarray:
    return weight.reshape(weight.shape[0], -1)


def generate(group, ctx) -> KernelSpec:
    conv, rest = split_heavy(group, ctx, ("conv2d",))
    x = ctx.type(conv.inputs[0])
    if x.dtype not in BLAS_DTYPES:
        raise Unsupported(f"conv2d in {x.dtype}")
    if not ctx.is_const(conv.inputs[1]):
        return _computed_weight(group, conv, rest, ctx)
    if depthwise.applies(conv, ctx) and depthwise.fusable(conv, rest, ctx):
        arranged = ctx.prepare_from(f"{conv.inputs[1]}.nchw.depthwise",
                                    logical(ctx, conv.inputs[1], _rows), conv.inputs[1])
        geo = geometry(conv, ctx)
        return depthwise.library(group, conv, rest, ctx, arranged, geo) or \
            depthwise.generate(group, conv, rest, ctx, arranged, geo)
    drv = _driver(conv, ctx)
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
    drv = _driver(conv, ctx)
    oh, ow = conv.type.shape[2:]
    if drv.library not in COMPUTED or (drv.note == "direct" and _direct_row(
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


@dataclass(frozen=True)
class Driver:
    pack: Callable[[np.ndarray], np.ndarray]  # the weight (logical), arranged for the driver
    call: str  # the whole batch through the driver
    scratch: dict[str, str]  # scratch value -> kernel parameter
    note: str
    image: str = ""  # one image `n` on one thread, scratch row `t` (NCHW only)
    runtime: str = ""  # `pack` as kernel code: the arranged weight from `w0`, at the call
    # (the drivers of `COMPUTED` only)

    @property
    def library(self) -> str:
        """The `runtime.conv_post` driver: this one with the common epilogue (NCHW only)."""
        return self.image.split("(")[0].replace("_image", "_post")


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
    scratch = {**drv.scratch, **_scratch(ctx, conv, {"ys": Scratch.rows(inner.dtype,
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


def _driver(conv, ctx) -> Driver:
    """How the convolution is computed: which runtime driver, on what weight and scratch."""
    x, w = (ctx.type(i) for i in conv.inputs)
    oc, cg, kh, kw = w.shape
    geo = geometry(conv, ctx)
    nhwc, cin, groups = x.layout == NHWC, x.shape[1], conv.attrs["groups"]
    layout = "nhwc" if nhwc else "nchw"
    ohw = conv.type.shape[2] * conv.type.shape[3]
    tiled = _tiled(conv, ctx, x, oc, geo) if groups == 1 and not nhwc and \
        x.dtype == DType.f32 else None
    if tiled is not None:
        return tiled
    if groups == 1 and geo[:6] == (1, 1, 1, 1, 0, 0):
        def packed(weight):
            return weight.reshape(oc, cg).T if nhwc else weight.reshape(oc, cg)

        return Driver(packed, f"conv1x1_{layout}(x0, x1, out, threads)", {}, "1x1",
                      "" if nhwc else "conv1x1_nchw_image(x0[n], x1, out[n])")
    if groups == 1 and not nhwc and cin < FEW_CHANNELS:
        scratch = _scratch(ctx, conv, {"cols": Scratch(x.dtype, ("threads", cin * kh * kw,
                                                                   ohw))})
        return Driver(_rows, "conv2d_nchw_few(x0, x1, out, cols, geo, threads)", scratch,
                      "im2col + GEMM", "conv2d_nchw_few_image(x0[n], x1, out[n], cols[t], geo)",
                      f"w0.reshape(({oc}, {cg * kh * kw}))")
    if groups == 1:
        shapes = {"cols": ("threads", ohw, kh * kw * cin)}
        if not nhwc:  # NCHW images go through the NHWC path one by one
            shapes |= {"xt": ("threads", x.shape[2], x.shape[3], cin), "tmp": ("threads", ohw,
                                                                               oc)}
        scratch = _scratch(ctx, conv, {k: Scratch(x.dtype, v) for k, v in shapes.items()})
        names = ", ".join(scratch.values())
        rows = ", ".join(f"{s}[t]" for s in scratch.values())
        return Driver(lambda w: w.transpose(2, 3, 1, 0).reshape(kh * kw * cg, oc),
                      f"conv2d_{layout}(x0, x1, out, {names}, geo, threads)", scratch,
                      "im2col + GEMM",
                      "" if nhwc else f"conv2d_nchw_image(x0[n], x1, out[n], {rows}, geo)")
    if groups == oc and cg == 1 and cin == groups:
        def packed(weight):
            return weight.reshape(oc, kh, kw).transpose(1, 2, 0) if nhwc else \
                weight.reshape(oc, kh * kw)

        return Driver(packed, f"depthwise_{layout}(x0, x1, out, geo, threads)", {},
                      "depthwise")
    return _grouped(ctx, conv, x, w.shape, groups, nhwc)


def _grouped(ctx, conv, x, wshape, groups: int, nhwc: bool) -> Driver:
    """`groups` convolutions side by side (`runtime.conv_grouped`): units of (image,
    group), each im2col of its channels and a product with its slice of the weight."""
    oc, cg, kh, kw = wshape
    ocg, ohw = oc // groups, conv.type.shape[2] * conv.type.shape[3]
    if nhwc:
        shapes = {"cols": ("threads", ohw, kh * kw * cg), "tmp": ("threads", ohw, ocg)}
    else:
        shapes = {"cols": ("threads", cg * kh * kw, ohw)}
    scratch = _scratch(ctx, conv, {k: Scratch(x.dtype, v) for k, v in shapes.items()})

    def packed(weight):
        wg = weight.reshape(groups, ocg, cg, kh, kw)
        if nhwc:
            return wg.transpose(0, 3, 4, 2, 1).reshape(groups, kh * kw * cg, ocg)
        return wg.reshape(groups, ocg, cg * kh * kw)

    layout = "nhwc" if nhwc else "nchw"
    return Driver(packed, f"conv2d_{layout}_grouped(x0, x1, out, "
                          f"{', '.join(scratch.values())}, geo, threads)", scratch,
                  f"{groups} groups, im2col + GEMM")


def _tiled(conv, ctx, x, oc: int, geo: tuple[int, ...]) -> Driver | None:
    """An f32 NCHW convolution on the register tile: as Winograd's F(2x2, 3x3) where that
    is faster, else direct where the tile fills its lanes; None otherwise."""
    oh, ow = conv.type.shape[2:]
    if _winograd_fits(geo, x.shape[1], oc, oh, ow):
        return _winograd(conv, ctx, x, oc, geo)
    if _direct_fits(_direct_row(geo, x.shape[3], oh, ow), oh):
        return _direct(conv, ctx, x, geo)
    return None


def geometry(conv, ctx) -> tuple[int, ...]:
    """(kh, kw, stride h/w, padding h/w, dilation h/w)."""
    kh, kw = ctx.type(conv.inputs[1]).shape[2:]
    a = conv.attrs
    return (kh, kw, *pair(a["stride"]), *pair(a["padding"]), *pair(a["dilation"]))


def _direct(conv, ctx, x, geo: tuple[int, ...]) -> Driver:
    """The f32 NCHW convolution on the register tile (`runtime.conv_direct`): the weight
    as [C*KH*KW, OC], one arranged image of scratch per thread."""
    xs = _arranged_size(geo, x.shape[1], *x.shape[2:])
    scratch = _scratch(ctx, conv, {"xs": Scratch(x.dtype, ("threads", 1)) if xs == 1 else
                                   Scratch.rows(x.dtype, xs)})
    oc, cg, kh, kw = ctx.type(conv.inputs[1]).shape
    return Driver(lambda w: _rows(w).T, "conv2d_nchw_direct(x0, x1, out, xs, geo, threads)",
                  scratch, "direct", "conv2d_nchw_direct_image(x0[n], x1, out[n], xs[t], geo)",
                  f"np.ascontiguousarray(w0.reshape(({oc}, {cg * kh * kw})).T)")


def _winograd_fits(geo: tuple[int, ...], cin: int, oc: int, oh, ow) -> bool:
    """Whether Winograd's F(2x2, 3x3) computes it (`runtime.winograd`): 3x3, stride 1, no
    dilation, even static output sizes, at least `WINOGRAD_MIN` channels and columns.
    A conv + ReLU compiled both ways, one thread, this machine (Zen 4): 8 -> 8 on 32x32
    0.28 of the direct tile's time, 16 -> 16 on 16x16 0.79, on 32x32 0.61, 24 -> 24 0.49,
    64 -> 8 0.54; but 6 -> 6 1.14, 3 -> 16 (a stem) 1.10, and rows of 8 columns 1.18-1.33
    (the transforms' vectors run along a row of tiles: 4 of 16 lanes)."""
    sizes = (oh, ow)
    return geo[:4] == (3, 3, 1, 1) and geo[6:] == (1, 1) and \
        all(isinstance(d, int) and d % 2 == 0 for d in sizes) and \
        min(cin, oc) >= WINOGRAD_MIN[0] and ow >= WINOGRAD_MIN[1]


def winograd_weight(weight: np.ndarray) -> np.ndarray:
    """A 3x3 weight [OC, C, 3, 3] as Winograd's U = G g G' [4, 4, C, OC], flat, computed
    in float64."""
    u = np.einsum("ab,ocbd,ed->aeco", WINOGRAD_G, weight.astype(np.float64), WINOGRAD_G)
    return u.astype(weight.dtype).reshape(-1)


def _winograd(conv, ctx, x, oc: int, geo: tuple[int, ...]) -> Driver:
    """The Winograd driver (`runtime.winograd`) on the transformed weight; one thread's
    scratch as `runtime.winograd.scratch_size` says (restated: lowering never imports the
    runtime; the driver refuses a smaller one)."""
    cin, (oh, ow) = x.shape[1], conv.type.shape[2:]
    th, tw = oh // 2, ow // 2
    tiles = min(th, max(1, 64 // tw)) * tw
    size = cin * (oh + 2) * (ow + 2) + 16 * (cin * tiles + 48) + 16 * (oc * tiles + 48)
    scratch = _scratch(ctx, conv, {"xs": Scratch.rows(x.dtype, size)})
    return Driver(winograd_weight, "conv2d_nchw_winograd(x0, x1, out, xs, geo, threads)",
                  scratch, "Winograd F(2x2, 3x3)",
                  "conv2d_nchw_winograd_image(x0[n], x1, out[n], xs[t], geo)",
                  "winograd_weight_of(w0)")


def _direct_row(geo: tuple[int, ...], w: int, oh: int, ow: int) -> int:
    """Pixels in a row of `conv_direct`'s tiles: the whole image when no tap reaches
    sideways and output rows fill the stride-phase planes (1x1, patch embeddings), else
    one output row."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    flat = (kw - 1) * dw < sw and ow == -(-(w + 2 * pw) // sw)
    return oh * ow if flat else ow


def _direct_fits(row: int, rows: int) -> bool:
    """Whether the direct tile fills its lanes: rows of 16 pixels or more, or of 5-8, two
    to a vector. (Rows of 4 or fewer, four to a vector, measured 3x slower than im2col on
    a 4x4 output of 64 channels.)"""
    return row >= DIRECT_MIN_ROW or (rows > 1 and DIRECT_LINES[0] <= row <= DIRECT_LINES[1])


def _arranged_size(geo: tuple[int, ...], ch: int, h: int, w: int) -> int:
    """Floats of one image arranged in stride-phase planes for `conv_direct` (1: an
    unpadded stride-1 image is read as it is). Lowering never imports the runtime, so this
    restates `conv_direct._phases`; the driver refuses a scratch smaller than it needs."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    if ph == 0 and pw == 0 and sh == 1 and sw == 1:
        return 1
    return ch * sh * sw * -(-(h + 2 * ph) // sh) * -(-(w + 2 * pw) // sw)


def _scratch(ctx, conv, scratch: dict[str, Scratch]) -> dict[str, str]:
    """Plan each kernel parameter's scratch; returns value name -> kernel parameter name."""
    return {ctx.add_scratch(f"{conv.name}.{k}", v): k for k, v in scratch.items()}
