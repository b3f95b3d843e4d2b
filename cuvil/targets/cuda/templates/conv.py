"""CUDA convolution: conv2d computed directly, one thread an output element, with the
group's elementwise epilogue (bias, activation, residual) applied before the store.

Any groups (depthwise included), stride, padding and dilation, NCHW or NHWC; the geometry
is the CPU template's (`cuvil.targets.cpu.templates.conv.geometry`), written into the kernel as
constants. The weight is an operand (OIHW, default layout): a constant weight is uploaded
to the device once, when the graph is built. Each thread sums its window over its group's
input channels in the output's dtype; no shared-memory tiling (a first kernel, correct
for every geometry, not the fastest one for large channel counts).
"""

from __future__ import annotations

from cuvil.ir.types import NHWC
from cuvil.lower.physical import layout_perm, np_name
from cuvil.lower.spec import KernelSpec, Unsupported
from cuvil.targets.cpu.templates.conv import geometry
from cuvil.targets.cpu.templates.gemm import split_heavy
from cuvil.targets.cuda.templates.elementwise import (
    FLOATS,
    device_text,
    epilogue,
    grid_loop,
    output_indices,
)


def generate(group, ctx) -> KernelSpec:
    conv, rest = split_heavy(group, ctx, ("conv2d",))
    x, w = (ctx.type(i) for i in conv.inputs)
    out = ctx.type(group.output)
    if conv.type.dtype not in FLOATS or x.dtype != conv.type.dtype or w.dtype != x.dtype:
        raise Unsupported("the CUDA convolution computes floats of one dtype")
    if layout_perm(w) != tuple(range(4)) or x.layout != conv.type.layout:
        raise Unsupported("the CUDA convolution reads an OIHW weight, x in its output's layout")
    if rest and (out.shape != conv.type.shape or out.layout != conv.type.layout):
        raise Unsupported("an epilogue that changes the convolution's shape")
    index = output_indices(out)
    params, args, store = epilogue(ctx, conv.name, rest, out, index, 2)
    body = window_sum(conv, x.layout == NHWC, index[1], np_name(x.dtype), ctx) + store
    note = "direct" + (f" + {', '.join(n.op for n in rest)}" if rest else "")
    return KernelSpec("conv", ["x0", "x1", *params, "out"],
                      [*conv.inputs, *args, group.output], device_text(grid_loop(4, body)),
                      parallel=False, fastmath="fast", note=note)


def window_sum(conv, nhwc: bool, logical: dict[int, str], dtype: str, ctx) -> list[str]:
    """Lines leaving the convolution's value at the current output element in `acc`."""
    kh, kw, sh, sw, ph, pw, dh, dw = geometry(conv, ctx)
    n, oc, i, j = (logical[d] for d in range(4))
    cg = ctx.type(conv.inputs[1]).shape[1]
    per_group = conv.type.shape[1] // conv.attrs["groups"]
    h, w = ("x0.shape[1]", "x0.shape[2]") if nhwc else ("x0.shape[2]", "x0.shape[3]")
    pixel = "x0[{n}, hh, ww, c0 + ic]" if nhwc else "x0[{n}, c0 + ic, hh, ww]"
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
        f"                    acc += {pixel.format(n=n)} * x1[{oc}, ic, a, b]",
    ]
