"""The convolution template: conv2d + elementwise epilogue, in NCHW or NHWC.

* groups == 1: im2col into a planned scratch buffer, then one BLAS product per image
  (NCHW: `W[oc, c*kh*kw] @ cols`; NHWC: `cols[pixels, kh*kw*c] @ W'`). A 1x1, stride-1,
  unpadded convolution needs no im2col at all; in NHWC it is a single product over every
  pixel of the batch, which is where the NHWC layout pays.
* depthwise (groups == channels): a direct kernel, parallel over planes (NCHW) or over
  output rows with the channel loop innermost and contiguous (NHWC).

The weight must be a constant; NHWC and depthwise kernels take it pre-arranged.
"""

from __future__ import annotations

import numpy as np

from cuvil.ir.types import NHWC
from cuvil.lower.physical import layout_perm
from cuvil.lower.templates.elementwise import literal
from cuvil.lower.templates.gemm import BLAS_DTYPES, epilogue, split_heavy
from cuvil.lower.templates.loops import indent
from cuvil.lower.templates.spec import KernelSpec, Scratch, Unsupported


def _pair(v) -> tuple[int, int]:
    return tuple(v) if isinstance(v, tuple | list) else (v, v)


def logical_const(ctx, value: str) -> np.ndarray:
    perm = layout_perm(ctx.type(value))
    return ctx.const_array(value).transpose([perm.index(d) for d in range(len(perm))])


def generate(group, ctx) -> KernelSpec:
    conv, rest = split_heavy(group, ctx, ("conv2d",))
    x, w = (ctx.type(i) for i in conv.inputs)
    if not ctx.is_const(conv.inputs[1]):
        raise Unsupported("conv2d with a computed weight")
    if x.dtype not in BLAS_DTYPES:
        raise Unsupported(f"conv2d in {x.dtype}")
    oc, cg, kh, kw = w.shape
    a = conv.attrs
    geo = dict(zip(("sh", "sw", "ph", "pw", "dh", "dw"),
                   (*_pair(a["stride"]), *_pair(a["padding"]), *_pair(a["dilation"])),
                   strict=True), kh=kh, kw=kw)
    nhwc = x.layout == NHWC
    weight = logical_const(ctx, conv.inputs[1])
    groups = a["groups"]
    if groups == 1:
        params, args, lines, scratch = _dense(conv, ctx, geo, nhwc, weight)
        parallel = False
    elif groups == oc and cg == 1 and x.shape[1] == groups:
        parallel = ctx.worth_parallel(conv.type.shape, kh * kw)
        params, args, lines, scratch = _depthwise(conv, ctx, geo, nhwc, weight, parallel)
    else:
        raise Unsupported(f"conv2d with groups={groups}")
    out_type = ctx.type(group.output)
    e_params, e_args, e_lines = epilogue(ctx, rest, out_type, conv.name, len(params))
    note = ("NHWC" if nhwc else "NCHW") + (", depthwise" if groups > 1 else "")
    return KernelSpec("conv", [*params, *e_params, "out"], [*args, *e_args, group.output],
                      lines + e_lines, parallel=parallel, scratch=scratch, note=note)


def _dense(conv, ctx, g, nhwc: bool, weight: np.ndarray):
    kh, kw = g["kh"], g["kw"]
    pointwise = kh == kw == 1 and g["sh"] == g["sw"] == 1 and g["ph"] == g["pw"] == 0
    out_t = conv.type
    ohw = out_t.shape[2] * out_t.shape[3]
    cin = ctx.type(conv.inputs[0]).shape[1]
    scratch = {}
    params, args = ["x0"], [conv.inputs[0]]
    if nhwc:
        packed = weight.transpose(2, 3, 1, 0).reshape(kh * kw * weight.shape[1], -1)
        params.append("x1")
        args.append(ctx.prepare(f"{conv.inputs[1]}.hwio", packed))
        lines = ["nb = x0.shape[0]", "h = x0.shape[1]", "w = x0.shape[2]", "ci = x0.shape[3]",
                 "oh = out.shape[1]", "ow = out.shape[2]", "oc = out.shape[3]"]
    else:
        params.append("x1")
        args.append(conv.inputs[1])
        lines = ["nb = x0.shape[0]", "ci = x0.shape[1]", "h = x0.shape[2]", "w = x0.shape[3]",
                 "oc = out.shape[1]", "oh = out.shape[2]", "ow = out.shape[3]",
                 f"wm = x1.reshape((oc, ci * {kh * kw}))"]
    if pointwise and nhwc:
        return params, args, lines + ["np.dot(x0.reshape((nb * h * w, ci)), x1, "
                                      "out.reshape((nb * oh * ow, oc)))"], scratch
    if pointwise:
        return params, args, lines + ["for n in range(nb):"] + indent(
            ["np.dot(wm, x0[n].reshape((ci, h * w)), out[n].reshape((oc, oh * ow)))"], 1), \
            scratch
    cols = ctx.add_scratch(f"{conv.name}.cols", Scratch(
        out_t.dtype, (ohw, kh * kw * cin) if nhwc else (cin * kh * kw, ohw)))
    scratch[cols] = ctx.scratch[cols]
    params.append("cols")
    args.append(cols)
    zero = literal(0, out_t.dtype)
    body = (_im2col_nhwc if nhwc else _im2col_nchw)(g, zero)
    gemm = ("np.dot(cols, x1, out[n].reshape((oh * ow, oc)))" if nhwc else
            "np.dot(wm, cols, out[n].reshape((oc, oh * ow)))")
    return params, args, lines + ["for n in range(nb):"] + indent(body + [gemm], 1), scratch


def _im2col_nchw(g, zero: str) -> list[str]:
    return ["for c in range(ci):"] + indent(
        [f"for a in range({g['kh']}):"] + indent(
            [f"for b in range({g['kw']}):"] + indent(
                [f"row = (c * {g['kh']} + a) * {g['kw']} + b", "for i in range(oh):"] + indent(
                    [f"hh = i * {g['sh']} - {g['ph']} + a * {g['dh']}",
                     "for j in range(ow):",
                     f"    ww = j * {g['sw']} - {g['pw']} + b * {g['dw']}",
                     "    if 0 <= hh < h and 0 <= ww < w:",
                     "        cols[row, i * ow + j] = x0[n, c, hh, ww]",
                     "    else:",
                     f"        cols[row, i * ow + j] = {zero}"], 1), 1), 1), 1)


def _im2col_nhwc(g, zero: str) -> list[str]:
    return ["for i in range(oh):"] + indent(
        ["for j in range(ow):", "    row = i * ow + j"] + indent(
            [f"for a in range({g['kh']}):"] + indent(
                [f"hh = i * {g['sh']} - {g['ph']} + a * {g['dh']}",
                 f"for b in range({g['kw']}):"] + indent(
                    [f"ww = j * {g['sw']} - {g['pw']} + b * {g['dw']}",
                     f"base = (a * {g['kw']} + b) * ci",
                     "if 0 <= hh < h and 0 <= ww < w:",
                     "    for c in range(ci):",
                     "        cols[row, base + c] = x0[n, hh, ww, c]",
                     "else:",
                     "    for c in range(ci):",
                     f"        cols[row, base + c] = {zero}"], 1), 1), 1), 1)


def _depthwise(conv, ctx, g, nhwc: bool, weight: np.ndarray, parallel: bool):
    kh, kw = g["kh"], g["kw"]
    zero = literal(0, conv.type.dtype)
    hh = f"hh = i * {g['sh']} - {g['ph']} + a * {g['dh']}"
    ww = f"ww = j * {g['sw']} - {g['pw']} + b * {g['dw']}"
    if nhwc:
        packed = weight.reshape(weight.shape[0], kh, kw).transpose(1, 2, 0)
        lines = ["nb = x0.shape[0]", "h = x0.shape[1]", "w = x0.shape[2]", "ch = x0.shape[3]",
                 "oh = out.shape[1]", "ow = out.shape[2]", "nq = nb * oh"]
        body = ["n = q // oh", "i = q % oh", "for j in range(ow):"] + indent(
            ["for c in range(ch):", f"    out[n, i, j, c] = {zero}", f"for a in range({kh}):"]
            + indent([hh, "if 0 <= hh < h:"] + indent(
                [f"for b in range({kw}):"] + indent(
                    [ww, "if 0 <= ww < w:", "    for c in range(ch):",
                     "        out[n, i, j, c] += x0[n, hh, ww, c] * x1[a, b, c]"], 1), 1), 1), 1)
        arg = ctx.prepare(f"{conv.inputs[1]}.hwc", packed)
    else:
        lines = ["nb = x0.shape[0]", "ch = x0.shape[1]", "h = x0.shape[2]", "w = x0.shape[3]",
                 "oh = out.shape[2]", "ow = out.shape[3]", "nq = nb * ch",
                 "x = x0.reshape((nq, h, w))", "o = out.reshape((nq, oh, ow))",
                 f"wd = x1.reshape((ch, {kh * kw}))"]
        body = ["c = q % ch", "for i in range(oh):"] + indent(
            ["for j in range(ow):"] + indent(
                [f"s = {zero}", f"for a in range({kh}):"] + indent(
                    [hh, "if 0 <= hh < h:"] + indent(
                        [f"for b in range({kw}):"] + indent(
                            [ww, "if 0 <= ww < w:",
                             f"    s += x[q, hh, ww] * wd[c, a * {kw} + b]"], 1), 1), 1)
                + ["o[q, i, j] = s"], 1), 1)
        arg = conv.inputs[1]
    loops = ["for q in range(nq):"] + indent(body, 1)
    if parallel:
        loops = ["if nq < 4:"] + indent(loops, 1) + \
            ["else:"] + indent(["for q in prange(nq):"] + indent(body, 1), 1)
    return ["x0", "x1"], [conv.inputs[0], arg], lines + loops, {}
