"""The convolution template: conv2d + elementwise epilogue, in NCHW or NHWC.

The convolution itself is a call of a driver in `cuvil.runtime.conv` (im2col + BLAS per
image, a single product for 1x1 NHWC, direct loops for NHWC depthwise), compiled once per
installation; the generated kernel passes the geometry and applies the group's epilogue.
A depthwise NCHW convolution is written out whole by `depthwise`, epilogue fused.
The weight must be a constant; it is pre-arranged for the layout at compile time.
"""

from __future__ import annotations

import numpy as np

from cuvil.ir.types import NHWC
from cuvil.lower.physical import layout_perm
from cuvil.lower.templates import depthwise
from cuvil.lower.templates.gemm import BLAS_DTYPES, epilogue, split_heavy
from cuvil.lower.templates.spec import THREADS, KernelSpec, Scratch, Unsupported
from cuvil.ops.nn import pair

FEW_CHANNELS = 8  # below this, NCHW im2col copies plane rows rather than channel runs


def logical_const(ctx, value: str) -> np.ndarray:
    perm = layout_perm(ctx.type(value))
    return ctx.const_array(value).transpose([perm.index(d) for d in range(len(perm))])


def generate(group, ctx) -> KernelSpec:
    conv, rest = split_heavy(group, ctx, ("conv2d",))
    x = ctx.type(conv.inputs[0])
    if not ctx.is_const(conv.inputs[1]):
        raise Unsupported("conv2d with a computed weight")
    if x.dtype not in BLAS_DTYPES:
        raise Unsupported(f"conv2d in {x.dtype}")
    if depthwise.applies(conv, ctx) and depthwise.fusable(conv, rest, ctx):
        weight = logical_const(ctx, conv.inputs[1])
        arranged = ctx.prepare(f"{conv.inputs[1]}.nchw.depthwise", weight.reshape(
            weight.shape[0], -1))
        return depthwise.generate(group, conv, rest, ctx, arranged, geometry(conv, ctx))
    packed, call, scratch, note = _driver(conv, ctx)
    layout = "nhwc" if x.layout == NHWC else "nchw"
    arranged = ctx.prepare(f"{conv.inputs[1]}.{layout}.{note}", packed)
    params = ["x0", "x1", *scratch.values(), "threads"]
    args = [conv.inputs[0], arranged, *scratch, THREADS]
    e_params, e_args, e_lines, parallel = epilogue(ctx, rest, ctx.type(group.output),
                                                   conv.name, len(params))
    return KernelSpec("conv", [*params, *e_params, "out"], [*args, *e_args, group.output],
                      [call] + e_lines, parallel=parallel,
                      scratch={name: ctx.scratch[name] for name in scratch},
                      note=f"{layout.upper()}, {note}")


def _driver(conv, ctx):
    """(weight arranged for the driver, the driver call, scratch value -> parameter, note)."""
    x, w = (ctx.type(i) for i in conv.inputs)
    oc, cg, kh, kw = w.shape
    a = conv.attrs
    geo = geometry(conv, ctx)
    nhwc, cin, groups = x.layout == NHWC, x.shape[1], a["groups"]
    layout = "nhwc" if nhwc else "nchw"
    weight = logical_const(ctx, conv.inputs[1])
    ohw = conv.type.shape[2] * conv.type.shape[3]
    if groups == 1 and geo[:6] == (1, 1, 1, 1, 0, 0):
        packed = weight.reshape(oc, cg).T if nhwc else weight.reshape(oc, cg)
        return packed, f"conv1x1_{layout}(x0, x1, out, threads)", {}, "1x1"
    if groups == 1 and not nhwc and cin < FEW_CHANNELS:
        scratch = _scratch(ctx, conv, x, {"cols": ("threads", cin * kh * kw, ohw)})
        return weight.reshape(oc, cg * kh * kw), \
            f"conv2d_nchw_few(x0, x1, out, cols, {geo}, threads)", scratch, "im2col + GEMM"
    if groups == 1:
        shapes = {"cols": ("threads", ohw, kh * kw * cin)}
        if not nhwc:  # NCHW images go through the NHWC path one by one
            shapes |= {"xt": ("threads", x.shape[2], x.shape[3], cin), "tmp": ("threads", ohw,
                                                                               oc)}
        scratch = _scratch(ctx, conv, x, shapes)
        names = ", ".join(scratch.values())
        return weight.transpose(2, 3, 1, 0).reshape(kh * kw * cg, oc), \
            f"conv2d_{layout}(x0, x1, out, {names}, {geo}, threads)", scratch, "im2col + GEMM"
    if groups == oc and cg == 1 and cin == groups:
        packed = weight.reshape(oc, kh, kw).transpose(1, 2, 0) if nhwc else \
            weight.reshape(oc, kh * kw)
        return packed, f"depthwise_{layout}(x0, x1, out, {geo}, threads)", {}, "depthwise"
    raise Unsupported(f"conv2d with groups={groups}")


def geometry(conv, ctx) -> tuple[int, ...]:
    """(kh, kw, stride h/w, padding h/w, dilation h/w)."""
    kh, kw = ctx.type(conv.inputs[1]).shape[2:]
    a = conv.attrs
    return (kh, kw, *pair(a["stride"]), *pair(a["padding"]), *pair(a["dilation"]))


def _scratch(ctx, conv, x, shapes: dict) -> dict[str, str]:
    """Planned per-thread scratch buffers: value name -> kernel parameter name."""
    return {ctx.add_scratch(f"{conv.name}.{k}", Scratch(x.dtype, v)): k for k, v in
            shapes.items()}
