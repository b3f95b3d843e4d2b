"""CUDA convolution: the implicit GEMM (`conv_gemm`) where it covers the convolution
(`groups == 1`, a static output size but for the batch), else conv2d computed directly
(grouped and depthwise convolutions), one thread an output element, with the
group's elementwise epilogue (bias, activation, residual) applied before the store, and a
max pool after it computed in the same thread (the max of the epilogue's values over the
pooled element's window, each convolution output it covers computed where it is read).

Any groups (depthwise included), stride, padding and dilation, NCHW or NHWC; the geometry
is the CPU target's (`cuvil.targets.cpu.templates.conv_drivers.geometry`), written into the
kernel as constants. The weight is an operand (OIHW, default layout): a constant weight is uploaded
to the device once, when the graph is built. Each thread sums its window over its group's
input channels in the output's dtype, without shared memory: correct for every geometry,
and it needs no channel count large enough to tile. Both read f16 operands of an f32
convolution (`widen`) as they are, widening each element as it is loaded.
"""

from __future__ import annotations

from cuvil.ir.types import NHWC, DType
from cuvil.lower.physical import layout_perm, np_name
from cuvil.lower.spec import KernelSpec, Unsupported
from cuvil.targets.cpu.templates.conv_drivers import geometry
from cuvil.targets.cpu.templates.elementwise import literal
from cuvil.targets.cpu.templates.gemm import split_heavy
from cuvil.targets.cpu.templates.loops import indent
from cuvil.targets.cpu.templates.pool import _geometry
from cuvil.targets.cuda.templates import conv_gemm, widen
from cuvil.targets.cuda.templates.elementwise import (
    FLOATS,
    device_text,
    epilogue,
    epilogue_value,
    grid_loop,
    output_indices,
)


def generate(group, ctx) -> KernelSpec:
    source = widen.sources(group, ctx)
    conv, rest = split_heavy(group, ctx, ("conv2d",))
    rest = [n for n in rest if n.name not in source]
    inputs = [source.get(i, i) for i in conv.inputs]
    x, w = (ctx.type(i) for i in inputs)
    out = ctx.type(group.output)
    pool = rest.pop() if rest and rest[-1].op == "max_pool2d" else None
    widened = (DType.f16, DType.f32)
    if conv.type.dtype not in FLOATS or \
            any(t.dtype != conv.type.dtype and (t.dtype, conv.type.dtype) != widened
                for t in (x, w)):
        raise Unsupported("the CUDA convolution computes floats of one dtype (or f16 into f32)")
    if layout_perm(w) != tuple(range(4)) or conv.type.layout != x.layout or \
            out.layout != conv.type.layout:
        raise Unsupported("the CUDA convolution reads an OIHW weight, x in its output's layout")
    pre = ctx.type(rest[-1].name) if rest else conv.type
    if pre.shape != conv.type.shape or pre.layout != conv.type.layout:
        raise Unsupported("an epilogue that changes the convolution's shape")
    if conv_gemm.covers(conv, out):
        return conv_gemm.generate(conv, rest, pool, group.output, ctx, inputs)
    index = output_indices(out)
    nhwc, dtype = x.layout == NHWC, np_name(conv.type.dtype)
    if pool is None:
        params, args, store = epilogue(ctx, conv.name, rest, out, index, 2)
        body = window_sum(conv, nhwc, index[1], dtype, ctx) + store
    else:
        params, args, body = _pooled(ctx, conv, rest, pool, index, nhwc)
    note = "direct" + (f" + {', '.join(n.op for n in [*rest, *([pool] if pool else [])])}"
                       if rest or pool else "")
    return KernelSpec("conv", ["x0", "x1", *params, "out"],
                      [*inputs, *args, group.output], device_text(grid_loop(4, body)),
                      parallel=False, fastmath="fast", note=note)


def _pooled(ctx, conv, rest, pool, index, nhwc: bool) -> tuple[list[str], list[str], list[str]]:
    """(params, args, body) of a pooled output element: the max over its window of the
    convolution's epilogue value, computed at each convolution output it covers."""
    kh, kw, sh, sw, ph, pw, dh, dw = _geometry(pool)
    pre = ctx.type(pool.inputs[0])
    if not all(isinstance(d, int) for d in pre.shape[2:]):
        raise Unsupported("a pooled convolution of symbolic height or width")
    n, c, i, j = (index[1][d] for d in range(4))
    at = {0: n, 1: c, 2: "ci", 3: "cj"}
    phys = [at[d] for d in layout_perm(pre)]
    params, args, value = epilogue_value(ctx, conv.name, rest, pre, (phys, at), 2)
    inner = window_sum(conv, nhwc, at, np_name(pre.dtype), ctx) + value + \
        ["best = vmaximum(value, best)"]
    body = [f"best = {literal(float('-inf'), pre.dtype)}", f"for pa in range({kh}):",
            f"    ci = {i} * {sh} - {ph} + pa * {dh}", f"    if ci >= 0 and ci < {pre.shape[2]}:",
            f"        for pb in range({kw}):", f"            cj = {j} * {sw} - {pw} + pb * {dw}",
            f"            if cj >= 0 and cj < {pre.shape[3]}:", *indent(inner, 4),
            f"out[{', '.join(index[0])}] = best"]
    return params, args, body


def window_sum(conv, nhwc: bool, logical: dict[int, str], dtype: str, ctx) -> list[str]:
    """Lines leaving the convolution's value at the current output element in `acc`."""
    kh, kw, sh, sw, ph, pw, dh, dw = geometry(conv, ctx)
    n, oc, i, j = (logical[d] for d in range(4))
    cg = ctx.type(conv.inputs[1]).shape[1]
    per_group = conv.type.shape[1] // conv.attrs["groups"]
    h, w = ("x0.shape[1]", "x0.shape[2]") if nhwc else ("x0.shape[2]", "x0.shape[3]")
    pixel = "x0[{n}, hh, ww, c0 + ic]" if nhwc else "x0[{n}, c0 + ic, hh, ww]"
    acc_dtype = conv.type.dtype
    xload = widen.load(pixel.format(n=n), widen.is_widened(ctx, conv.inputs[0]), acc_dtype)
    wload = widen.load(f"x1[{oc}, ic, a, b]", widen.is_widened(ctx, conv.inputs[1]), acc_dtype)
    return [
        f"acc = {dtype}(0)", f"c0 = ({oc} // {per_group}) * {cg}",
        f"hs = {i} * {sh} - {ph}", f"ws = {j} * {sw} - {pw}",
        f"for a in range({kh}):",
        f"    hh = hs + a * {dh}",
        f"    if hh >= 0 and hh < {h}:",
        f"        for b in range({kw}):",
        f"            ww = ws + b * {dw}",
        f"            if ww >= 0 and ww < {w}:",
        f"                for ic in range({cg}):",
        f"                    acc += {xload} * {wload}",
    ]
