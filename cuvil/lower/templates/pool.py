"""The pooling template: max/avg pooling and adaptive average pooling, NCHW or NHWC.

NCHW walks each (image, channel) plane; NHWC walks output pixels and keeps the channel
loop innermost, where it is contiguous and vectorizes. Window bounds follow torch exactly
(padding, dilation, `ceil_mode`, `count_include_pad`).
"""

from __future__ import annotations

from cuvil.ir.types import NHWC
from cuvil.lower.physical import np_name
from cuvil.lower.templates.elementwise import literal
from cuvil.lower.templates.loops import indent
from cuvil.lower.templates.spec import KernelSpec, Unsupported


def _pair(v) -> tuple[int, int]:
    return tuple(v) if isinstance(v, tuple | list) else (v, v)


def generate(group, ctx) -> KernelSpec:
    nodes = group.node_list(ctx)
    if len(nodes) != 1:
        raise Unsupported("pool kernels take one op")
    node = nodes[0]
    x = ctx.type(node.inputs[0])
    if not x.dtype.is_float:
        raise Unsupported(f"{node.op} on {x.dtype}")
    nhwc = x.layout == NHWC
    window = _window(node, x.dtype)
    reduce_ = _reduce(node, x.dtype, nhwc)
    if nhwc:
        head = ["nb = x0.shape[0]", "h = x0.shape[1]", "w = x0.shape[2]", "ch = x0.shape[3]",
                "oh = out.shape[1]", "ow = out.shape[2]", "nq = nb * oh"]
        loop = ["n = q // oh", "i = q % oh", "for j in range(ow):"] + indent(window + reduce_, 1)
    else:
        head = ["nb = x0.shape[0]", "ch = x0.shape[1]", "h = x0.shape[2]", "w = x0.shape[3]",
                "oh = out.shape[2]", "ow = out.shape[3]", "nq = nb * ch",
                "x = x0.reshape((nq, h, w))", "o = out.reshape((nq, oh, ow))"]
        loop = ["for i in range(oh):"] + indent(
            ["for j in range(ow):"] + indent(window + reduce_, 1), 1)
    serial = ["for q in range(nq):"] + indent(loop, 1)
    window_size = x.numel / node.type.numel if node.op == "adaptive_avg_pool2d" else \
        _pair(node.attrs["kernel_size"])[0] * _pair(node.attrs["kernel_size"])[1]
    parallel = ctx.worth_parallel(node.type.shape, window_size)
    if parallel:
        lines = head + [f"if nq * oh * ow < {max(ctx.par_min // 64, 1)}:"] + indent(serial, 1)
        lines += ["else:"] + indent(["for q in prange(nq):"] + indent(loop, 1), 1)
    else:
        lines = head + serial
    return KernelSpec("pool", ["x0", "out"], [node.inputs[0], node.name], lines, parallel)


def _window(node, dtype) -> list[str]:
    """Lines setting h0, h1, w0, w1 (clipped window) and `count` (the avg divisor)."""
    a = node.attrs
    if node.op == "adaptive_avg_pool2d":
        return ["h0 = (i * h) // oh", "h1 = ((i + 1) * h + oh - 1) // oh",
                "w0 = (j * w) // ow", "w1 = ((j + 1) * w + ow - 1) // ow",
                "count = (h1 - h0) * (w1 - w0)"]
    (kh, kw), (ph, pw) = _pair(a["kernel_size"]), _pair(a["padding"])
    sh, sw = _pair(a["stride"]) if a["stride"] else (kh, kw)
    dh, dw = _pair(a.get("dilation", 1))
    lines = [f"hs = i * {sh} - {ph}", f"ws = j * {sw} - {pw}",
             f"he = min(hs + {(kh - 1) * dh + 1}, h + {ph})",
             f"we = min(ws + {(kw - 1) * dw + 1}, w + {pw})",
             "full = (he - hs) * (we - ws)", "h0 = max(hs, 0)", "w0 = max(ws, 0)",
             "h1 = min(he, h)", "w1 = min(we, w)"]
    if node.op == "avg_pool2d":
        include = a["count_include_pad"]
        lines.append("count = full" if include else "count = (h1 - h0) * (w1 - w0)")
    return lines


def _reduce(node, dtype, nhwc: bool) -> list[str]:
    is_max = node.op == "max_pool2d"
    a = node.attrs
    dh, dw = _pair(a.get("dilation", 1)) if is_max else (1, 1)
    init = literal(float("-inf"), dtype) if is_max else literal(0, dtype)
    hrange = f"range(hs + ((h0 - hs + {dh - 1}) // {dh}) * {dh}, h1, {dh})" if is_max and \
        dh > 1 else "range(h0, h1)"
    wrange = f"range(ws + ((w0 - ws + {dw - 1}) // {dw}) * {dw}, w1, {dw})" if is_max and \
        dw > 1 else "range(w0, w1)"
    step = "max(m, {v})" if is_max else "m + {v}"
    if nhwc:
        lines = ["for c in range(ch):", f"    out[n, i, j, c] = {init}",
                 f"for hh in {hrange}:", f"    for ww in {wrange}:", "        for c in range(ch):",
                 "            m = out[n, i, j, c]",
                 "            out[n, i, j, c] = " + step.format(v="x0[n, hh, ww, c]")]
        if not is_max:
            lines += ["for c in range(ch):", f"    out[n, i, j, c] = out[n, i, j, c] / "
                      f"{np_name(dtype)}(count)"]
        return lines
    lines = [f"m = {init}", f"for hh in {hrange}:", f"    for ww in {wrange}:",
             "        m = " + step.format(v="x[q, hh, ww]")]
    return lines + (["o[q, i, j] = m"] if is_max else
                    [f"o[q, i, j] = m / {np_name(dtype)}(count)"])
