"""How the CPU target computes a convolution: which driver of `kernels.conv`,
`.conv_direct`, `.winograd` or `.conv_grouped` (`driver`), on what arranged weight and
scratch, and the sizes its tiles need (restated here: lowering never imports the runtime).
`templates.conv` makes the kernel around the choice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from cuvil.ir.types import NHWC, DType
from cuvil.lower.spec import Scratch
from cuvil.ops.nn import pair

FEW_CHANNELS = 8  # below this, NCHW im2col copies plane rows rather than channel runs
DIRECT_MIN_ROW = 16  # output pixels per tile row below which the direct tile idles lanes
DIRECT_LINES = (5, 8)  # ...but rows this short go two to a vector (`runtime.f32_lines`)
WINOGRAD_MIN = (8, 16)  # channels in and out, output columns: below, the direct tile
WINOGRAD_G = np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]])  # F(2x2, 3x3)


@dataclass(frozen=True)
class Driver:
    pack: Callable[[np.ndarray], np.ndarray]  # the weight (logical), arranged for the driver
    call: str  # the whole batch through the driver
    scratch: dict[str, str]  # scratch value -> kernel parameter
    note: str
    image: str = ""  # one image `n` on one thread, scratch row `t` (NCHW only)
    runtime: str = ""  # `pack` as kernel code: the arranged weight from `w0`, at the call
    # (the drivers of `templates.conv.COMPUTED` only)

    @property
    def library(self) -> str:
        """The `runtime.conv_post` driver: this one with the common epilogue (NCHW only)."""
        return self.image.split("(")[0].replace("_image", "_post")


def weight_rows(weight: np.ndarray) -> np.ndarray:
    return weight.reshape(weight.shape[0], -1)


def driver(conv, ctx) -> Driver:
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
        cols = Scratch(x.dtype, ("threads", cin * kh * kw, ohw))
        scratch = planned_scratch(ctx, conv, {"cols": cols})
        return Driver(weight_rows, "conv2d_nchw_few(x0, x1, out, cols, geo, threads)", scratch,
                      "im2col + GEMM", "conv2d_nchw_few_image(x0[n], x1, out[n], cols[t], geo)",
                      f"w0.reshape(({oc}, {cg * kh * kw}))")
    if groups == 1:
        shapes = {"cols": ("threads", ohw, kh * kw * cin)}
        if not nhwc:  # NCHW images go through the NHWC path one by one
            shapes |= {"xt": ("threads", x.shape[2], x.shape[3], cin), "tmp": ("threads", ohw,
                                                                               oc)}
        scratch = planned_scratch(ctx, conv,
                                  {k: Scratch(x.dtype, v) for k, v in shapes.items()})
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
    scratch = planned_scratch(ctx, conv,
                              {k: Scratch(x.dtype, v) for k, v in shapes.items()})

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
    if _direct_fits(direct_row(geo, x.shape[3], oh, ow), oh):
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
    scratch = planned_scratch(ctx, conv, {"xs": Scratch(x.dtype, ("threads", 1)) if xs == 1
                                          else Scratch.rows(x.dtype, xs)})
    oc, cg, kh, kw = ctx.type(conv.inputs[1]).shape
    return Driver(lambda w: weight_rows(w).T, "conv2d_nchw_direct(x0, x1, out, xs, geo, threads)",
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
    scratch = planned_scratch(ctx, conv, {"xs": Scratch.rows(x.dtype, size)})
    return Driver(winograd_weight, "conv2d_nchw_winograd(x0, x1, out, xs, geo, threads)",
                  scratch, "Winograd F(2x2, 3x3)",
                  "conv2d_nchw_winograd_image(x0[n], x1, out[n], xs[t], geo)",
                  "winograd_weight_of(w0)")


def direct_row(geo: tuple[int, ...], w: int, oh: int, ow: int) -> int:
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


def planned_scratch(ctx, conv, scratch: dict[str, Scratch]) -> dict[str, str]:
    """Plan each kernel parameter's scratch; returns value name -> kernel parameter name."""
    return {ctx.add_scratch(f"{conv.name}.{k}", v): k for k, v in scratch.items()}
