"""The pooling template: max/avg pooling and adaptive average pooling, NCHW or NHWC.

Window geometry is known at compile time and written into the kernel as constants. NCHW
kernels fill one output row at a time. When every window lies inside the image (no
padding, no dilation, no partial window at the end: the usual 2x2 / 3x3 pools) the window
is written out as one expression per output pixel over the rows it reads (a 2x2 max pool
of 16x16x32x32: 15 us, against 95 for the general loop); otherwise each window offset's
valid column range is added as a whole. NHWC kernels keep the contiguous channel loop
innermost. Global average pooling (output 1x1) is a plain row sum. Bounds
follow torch exactly (padding, dilation, `ceil_mode`, `count_include_pad`).
"""

from __future__ import annotations

import numpy as np

from cuvil.ir.types import NHWC, is_static
from cuvil.lower.physical import layout_perm, np_name
from cuvil.lower.spec import THREADS, KernelSpec, Unsupported
from cuvil.ops.nn import pair
from cuvil.targets.cpu.templates import pool_indices
from cuvil.targets.cpu.templates.elementwise import literal
from cuvil.targets.cpu.templates.loops import indent


def generate(group, ctx) -> KernelSpec:
    nodes = group.node_list(ctx)
    if len(nodes) != 1:
        raise Unsupported("pool kernels take one op")
    node = nodes[0]
    if node.op in pool_indices.OPS:
        return pool_indices.generate(node, ctx)
    x = ctx.type(node.inputs[0])
    if not x.dtype.is_float:
        raise Unsupported(f"{node.op} on {x.dtype}")
    library = _library(node, x, ctx)
    if library is not None:
        return library
    nhwc = x.layout == NHWC
    if node.op == "adaptive_avg_pool2d" and tuple(pair(node.attrs["output_size"])) == (1, 1):
        head, loop = _global_average(nhwc, x.dtype)
    elif node.op == "adaptive_avg_pool2d":
        head, loop = _adaptive(nhwc, x.dtype)
    elif nhwc:
        head, loop = _windows_nhwc(node, x.dtype)
    elif _inside(node, x):
        head, loop = _windows_inside(node, x.dtype)
    elif node.op == "max_pool2d" and _taps(node) <= 16:
        head, loop = _max_windows_nchw(node, x.dtype)
    else:
        head, loop = _windows_nchw(node, x.dtype)
    window = x.numel / node.type.numel if node.op == "adaptive_avg_pool2d" else \
        pair(node.attrs["kernel_size"])[0] * pair(node.attrs["kernel_size"])[1]
    parallel = ctx.worth_parallel(node.type.shape, window)
    serial = ["for q in range(nq):"] + indent(loop, 1)
    lines = head + serial
    if parallel:
        lines = head + ["if nq < 4 or out.size < 4096:"] + indent(serial, 1) + ["else:"] + \
            indent(["for q in prange(nq):"] + indent(loop, 1), 1)
    return KernelSpec("pool", ["x0", "out"], [node.inputs[0], node.name], lines, parallel)


def _library(node, x, ctx) -> KernelSpec | None:
    """The kernel as a `runtime.pool` function itself, for an NCHW global average or a pool
    whose windows all lie inside the image: nothing to generate or compile per model."""
    if list(layout_perm(x)) != list(range(4)) or x.dtype != node.type.dtype:
        return None
    if node.op == "adaptive_avg_pool2d" and tuple(pair(node.attrs["output_size"])) == (1, 1):
        return KernelSpec("pool", ["x", "parts", "out"], [node.inputs[0], THREADS, node.name],
                          [], note="global average", library="global_average_nchw")
    if node.op not in ("max_pool2d", "avg_pool2d") or not _inside(node, x):
        return None
    kh, kw, sh, sw, *_ = _geometry(node)
    geo = ctx.prepare(f"pool.{kh}.{kw}.{sh}.{sw}.{node.op}", np.array(
        [kh, kw, sh, sw, node.op == "max_pool2d"], np.int64))
    return KernelSpec("pool", ["x", "geo", "parts", "out"],
                      [node.inputs[0], geo, THREADS, node.name], [],
                      note=f"{kh}x{kw} windows inside the image", library="pool_inside_nchw")


_NCHW = ["nb = x0.shape[0]", "ch = x0.shape[1]", "h = x0.shape[2]", "w = x0.shape[3]",
         "oh = out.shape[2]", "ow = out.shape[3]", "nq = nb * ch",
         "x = x0.reshape((nq, h, w))", "o = out.reshape((nq, oh, ow))"]
_NHWC = ["nb = x0.shape[0]", "h = x0.shape[1]", "w = x0.shape[2]", "ch = x0.shape[3]",
         "oh = out.shape[1]", "ow = out.shape[2]"]


def _geometry(node):
    a = node.attrs
    (kh, kw), (ph, pw) = pair(a["kernel_size"]), pair(a["padding"])
    sh, sw = pair(a["stride"]) if a["stride"] else (kh, kw)
    dh, dw = pair(a.get("dilation", 1))
    return kh, kw, sh, sw, ph, pw, dh, dw


def _windows_nchw(node, dtype):
    kh, kw, sh, sw, ph, pw, dh, dw = _geometry(node)
    is_max = node.op == "max_pool2d"
    init = literal(float("-inf") if is_max else 0, dtype)
    step = "vmaximum({v}, o[q, i, j])" if is_max else "o[q, i, j] + {v}"
    loop = [f"hs = i * {sh} - {ph}", "for j in range(ow):", f"    o[q, i, j] = {init}",
            f"for a in range({kh}):"] + indent(
        [f"hh = hs + a * {dh}", "if hh < 0 or hh >= h:", "    continue",
         f"for b in range({kw}):"] + indent(
            [f"off = b * {dw} - {pw}",
             f"j0 = 0 if off >= 0 else (-off + {sw - 1}) // {sw}",
             f"j1 = min(ow, (w - 1 - off) // {sw} + 1) if w - 1 - off >= 0 else 0",
             "for j in range(j0, j1):",
             "    o[q, i, j] = " + step.format(v=f"x[q, hh, j * {sw} + off]")], 1), 1)
    if not is_max:
        loop += [f"he = hs + {kh}", "for j in range(ow):"] + indent(
            [f"ws = j * {sw} - {pw}", f"we = ws + {kw}"] + _avg_divisor(node, dtype)
            + ["o[q, i, j] = o[q, i, j] / count"], 1)
    return _NCHW, ["for i in range(oh):"] + indent(loop, 1)


def _taps(node) -> int:
    kh, kw, *_ = _geometry(node)
    return kh * kw


def _max_windows_nchw(node, dtype):
    """A max pool whose windows may reach past the image, output pixel by pixel: a window
    inside the image as one expression over its taps (ResNet-18's 3x3/2 pad 1 pool at
    batch 32, one thread: 7.2 -> 4.6 ms a call), one at the border scanned from its first tap
    inside the image."""
    kh, kw, sh, sw, ph, pw, dh, dw = _geometry(node)
    span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    head = [*_NCHW, "x = x0.reshape((nq, h * w))",  # rows [ia, ib), columns [ja, jb): inside
            f"ia = {-(-ph // sh)}", f"ib = (h - {span_h} + {ph}) // {sh} + 1",
            f"ja = {-(-pw // sw)}", f"jb = (w - {span_w} + {pw}) // {sw} + 1"]
    taps = [f"xq[p + {a * dh} * w + {b * dw}]" for a in range(kh) for b in range(kw)]
    value = "xq[p]"
    for tap in taps[1:]:
        value = f"vmaximum({tap}, {value})"
    border = [f"w0 = j * {sw} - {pw}", f"w1 = min(w0 + {span_w}, w)", "while w0 < 0:",
              f"    w0 += {dw}", f"m = {literal(float('-inf'), dtype)}",
              f"for hh in range(h0, h1, {dh}):", f"    for ww in range(w0, w1, {dw}):",
              "        m = vmaximum(xq[hh * w + ww], m)", "orow[j] = m"]
    pixel = ["if inner and ja <= j < jb:", f"    p = h0 * w + j * {sw} - {pw}",
             f"    orow[j] = {value}", "    continue", *border]
    row = [f"h0 = i * {sh} - {ph}", f"h1 = min(h0 + {span_h}, h)", "inner = ia <= i < ib",
           "while h0 < 0:", f"    h0 += {dh}", "orow = o[q, i]", "for j in range(ow):"]
    return head, ["xq = x[q]", "for i in range(oh):"] + indent(row + indent(pixel, 1), 1)


def _inside(node, x) -> bool:
    """Whether every window lies inside the image (static sizes, no padding or dilation)."""
    kh, kw, sh, sw, ph, pw, dh, dw = _geometry(node)
    h, w = x.shape[2], x.shape[3]
    oh, ow = node.type.shape[2], node.type.shape[3]
    if not all(is_static(d) for d in (h, w, oh, ow)) or (ph, pw, dh, dw) != (0, 0, 1, 1):
        return False
    return (oh - 1) * sh + kh <= h and (ow - 1) * sw + kw <= w and kh * kw <= 16


def _windows_inside(node, dtype):
    """Each output pixel as one expression over the window's rows (see the docstring)."""
    kh, kw, sh, sw, *_ = _geometry(node)
    taps = [f"r{a}[j * {sw} + {b}]" for a in range(kh) for b in range(kw)]
    if node.op == "max_pool2d":
        value = taps[0]
        for t in taps[1:]:
            value = f"vmaximum({value}, {t})"
    else:
        value = f"({' + '.join(taps)}) / {literal(kh * kw, dtype)}"
    rows = [f"r{a} = x[q, i * {sh} + {a}]" for a in range(kh)]
    loop = ["for i in range(oh):"] + indent(rows + ["orow = o[q, i]", "for j in range(ow):",
                                                    f"    orow[j] = {value}"], 1)
    return _NCHW, loop


def _avg_divisor(node, dtype) -> list[str]:
    """`count` for the window [hs, he) x [ws, we), torch's rule for `count_include_pad`."""
    kh, kw, sh, sw, ph, pw, _, _ = _geometry(node)
    if node.attrs["count_include_pad"]:
        return [f"count = {np_name(dtype)}((min(he, h + {ph}) - hs) * (min(we, w + {pw}) - ws))"]
    return [f"count = {np_name(dtype)}((min(he, h) - max(hs, 0)) * (min(we, w) - max(ws, 0)))"]


def _windows_nhwc(node, dtype):
    kh, kw, sh, sw, ph, pw, dh, dw = _geometry(node)
    is_max = node.op == "max_pool2d"
    init = literal(float("-inf") if is_max else 0, dtype)
    step = "vmaximum({v}, out[n, i, j, c])" if is_max else "out[n, i, j, c] + {v}"
    body = ["for c in range(ch):", f"    out[n, i, j, c] = {init}", f"ws = j * {sw} - {pw}",
            f"for a in range({kh}):"] + indent(
        [f"hh = hs + a * {dh}", "if hh < 0 or hh >= h:", "    continue",
         f"for b in range({kw}):"] + indent(
            [f"ww = ws + b * {dw}", "if 0 <= ww < w:", "    for c in range(ch):",
             "        out[n, i, j, c] = " + step.format(v="x0[n, hh, ww, c]")], 1), 1)
    if not is_max:
        body += [f"he = hs + {kh}", f"we = ws + {kw}"] + _avg_divisor(node, dtype) + [
            "for c in range(ch):", "    out[n, i, j, c] = out[n, i, j, c] / count"]
    loop = ["n = q // oh", "i = q % oh", f"hs = i * {sh} - {ph}", "for j in range(ow):"]
    return _NHWC + ["nq = nb * oh"], loop + indent(body, 1)


def _adaptive(nhwc: bool, dtype):
    bounds = ["h0 = (i * h) // oh", "h1 = ((i + 1) * h + oh - 1) // oh",
              "w0 = (j * w) // ow", "w1 = ((j + 1) * w + ow - 1) // ow",
              f"count = {np_name(dtype)}((h1 - h0) * (w1 - w0))"]
    zero = literal(0, dtype)
    if nhwc:
        body = bounds + ["for c in range(ch):", f"    out[n, i, j, c] = {zero}",
                         "for hh in range(h0, h1):", "    for ww in range(w0, w1):",
                         "        for c in range(ch):",
                         "            out[n, i, j, c] += x0[n, hh, ww, c]",
                         "for c in range(ch):", "    out[n, i, j, c] = out[n, i, j, c] / count"]
        return _NHWC + ["nq = nb * oh"], ["n = q // oh", "i = q % oh", "for j in range(ow):"] \
            + indent(body, 1)
    body = bounds + [f"s = {zero}", "for hh in range(h0, h1):", "    for ww in range(w0, w1):",
                     "        s += x[q, hh, ww]", "o[q, i, j] = s / count"]
    return _NCHW, ["for i in range(oh):", "    for j in range(ow):"] + indent(body, 2)


def _global_average(nhwc: bool, dtype):
    zero, cast = literal(0, dtype), np_name(dtype)
    if nhwc:
        head = _NHWC + ["nq = nb", "x = x0.reshape((nb, h * w, ch))",
                        "o = out.reshape((nb, ch))", f"inv = {cast}(1) / {cast}(h * w)"]
        loop = ["for c in range(ch):", f"    o[q, c] = {zero}", "for t in range(h * w):",
                "    for c in range(ch):", "        o[q, c] += x[q, t, c]",
                "for c in range(ch):", "    o[q, c] *= inv"]
        return head, loop
    head = ["nq = x0.shape[0] * x0.shape[1]", "hw = x0.shape[2] * x0.shape[3]",
            "x = x0.reshape((nq, hw))", "o = out.reshape((nq,))", f"inv = {cast}(1) / {cast}(hw)"]
    return head, [f"s = {zero}", "for t in range(hw):", "    s += x[q, t]", "o[q] = s * inv"]
