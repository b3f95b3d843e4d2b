"""Depthwise convolution in NCHW with its epilogue fused: one pass over the output.

The geometry is known when the kernel is generated, so the taps are written out: each
output element is one sum of `KH*KW` products over rows of a zero-padded copy of its input
plane (`pad_plane`, per thread), and the group's elementwise epilogue (bias, ReLU6, ...)
is applied to that sum before it is stored. The inner loop runs along an output row with
no bounds checks, so LLVM vectorizes it. On MobileNet's 3x3 depthwise layer (16 images of
64x32x32) this is ~10x faster than the loop over taps with bounds per row that it
replaces, and the separate epilogue pass over the output is gone.

Planes (image, channel) are split between threads; the pad buffer is per-thread scratch.

An f32 square 3x3, 5x5 or 7x7 window of stride 1 whose epilogue is a bias and a clip
(`templates.post`) is the runtime's `depthwise_nchw_post` instead (`library`): nothing
generated, and on MobileNet's layer 2-3x faster (it neither copies planes into a zero
border nor leaves rows of 32 pixels to LLVM's scalar loop).
"""

from __future__ import annotations

from cuvil.ir.types import DType
from cuvil.lower.physical import layout_perm
from cuvil.lower.spec import THREADS, KernelSpec, Scratch
from cuvil.targets.cpu.templates.elementwise import ExprBuilder
from cuvil.targets.cpu.templates.loops import NotPlain, indent, plain_loads
from cuvil.targets.cpu.templates.post import geometry_arg, match, post_args

INDEX = ("n", "c", "i", "j")  # the output's logical (and physical, NCHW) indices
PAR_WORK = 1 << 18  # multiply-adds below which one thread does every plane
LIBRARY_SIZES = (3, 5, 7)  # `runtime.depthwise.SIZES` (lowering never imports the runtime)


def applies(conv, ctx) -> bool:
    """A depthwise convolution (one input channel per group, as many outputs) in NCHW."""
    x, w = (ctx.type(i) for i in conv.inputs)
    groups = conv.attrs["groups"]
    return groups > 1 and w.shape[0] == groups and w.shape[1] == 1 and \
        x.shape[1] == groups and list(layout_perm(x)) == list(range(4))


def fusable(conv, rest, ctx) -> bool:
    """Whether this depthwise NCHW convolution and its epilogue fit the template."""
    out = ctx.type(conv.name)
    if not all(isinstance(d, int) for d in out.shape[2:]):
        return False
    if list(layout_perm(out)) != list(range(4)) or list(layout_perm(ctx.type(conv.inputs[0]))) != \
            list(range(4)):
        return False
    try:
        plain_loads(ExprBuilder(ctx, out, {conv.name: "acc"}).build(rest), INDEX)
    except NotPlain:
        return False
    return True


def library(group, conv, rest, ctx, weight, geo: tuple[int, ...]) -> KernelSpec | None:
    """The kernel as the runtime's `depthwise_nchw_post`, when the window, the dtype and
    the epilogue (a bias and a clip at most) are what it computes; else None."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    out = ctx.type(group.output)
    if kh != kw or kh not in LIBRARY_SIZES or (sh, sw, dh, dw) != (1, 1, 1, 1) or \
            {ctx.type(conv.inputs[0]).dtype, out.dtype} != {DType.f32}:
        return None
    post = match(ctx, conv.name, rest, out, 1)
    if post is None or post.gelu or post.res is not None:
        return None
    bias, _, clip = post_args(ctx, post, out)
    return KernelSpec("conv", ["x", "w", "bias", "clip", "geo", "parts", "out"],
                      [conv.inputs[0], weight, bias, clip, geometry_arg(ctx, geo), THREADS,
                       group.output],
                      [], note=f"NCHW, depthwise, epilogue {post.describe()}",
                      library="depthwise_nchw_post")


def generate(group, conv, rest, ctx, weight, geo: tuple[int, ...]) -> KernelSpec:
    """A kernel for `conv` (depthwise, NCHW) followed by the elementwise nodes `rest`;
    `weight` is the constant's value name, arranged as [C, KH*KW]."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    x = ctx.type(conv.inputs[0])
    pad = ctx.add_scratch(f"{conv.name}.pad", Scratch(
        x.dtype, ("threads", _padded(x.shape[2], ph), _padded(x.shape[3], pw))))
    params = ["x0", "x1", "pad", "threads"]
    expr = ExprBuilder(ctx, ctx.type(group.output), {conv.name: "acc"}, len(params)).build(rest)
    loads = plain_loads(expr, INDEX)
    store = expr.body(loads, "out[n, c, i, j]") if rest else ["out[n, c, i, j] = acc"]
    plane = _plane(geo, store)
    work = kh * kw + 4 * len(rest)
    body = ["nb, ch = x0.shape[0], x0.shape[1]", "oh, ow = out.shape[2], out.shape[3]",
            "nq = nb * ch",
            f"if threads < 2 or nq * oh * ow * {work} < {PAR_WORK}:",
            "    p = pad[0]",
            "    for q in range(nq):", *indent(plane, 2),
            "else:",
            "    parts = min(threads, pad.shape[0])",
            "    step = (nq + parts - 1) // parts",
            "    for t in prange(parts):",
            "        p = pad[t]",
            "        for q in range(min(nq, t * step), min(nq, (t + 1) * step)):",
            *indent(plane, 3)]
    return KernelSpec("conv", [*params, *(op.arg for op in expr.operands), "out"],
                      [conv.inputs[0], weight, pad, THREADS, *expr.args, group.output],
                      body, parallel=ctx.worth_parallel(ctx.type(group.output).shape, work),
                      scratch={pad: ctx.scratch[pad]},
                      note="NCHW, depthwise, taps unrolled, epilogue fused")


def _plane(geo, store: list[str]) -> list[str]:
    """One plane q = (image n, channel c): pad it, then every output element."""
    kh, kw, sh, sw, ph, pw, dh, dw = geo
    taps = [(a, b) for a in range(kh) for b in range(kw)]
    weights = [f"w{k} = x1[c, {k}]" for k in range(len(taps))]
    rows = [f"r{a} = p[{_affine('i', sh, a * dh)}]" for a in range(kh)]
    terms = " + ".join(f"w{k} * r{a}[{_affine('j', sw, b * dw)}]"
                       for k, (a, b) in enumerate(taps))
    return ["n = q // ch", "c = q % ch", f"pad_plane(x0[n, c], p, {ph}, {pw})", *weights,
            "for i in range(oh):", *indent(rows, 1),
            "    for j in range(ow):", f"        acc = {terms}", *indent(store, 2)]


def _affine(var: str, stride: int, offset: int) -> str:
    scaled = var if stride == 1 else f"{stride} * {var}"
    return scaled if offset == 0 else f"{scaled} + {offset}"


def _padded(size: int, pad: int) -> int:
    return size + 2 * pad

