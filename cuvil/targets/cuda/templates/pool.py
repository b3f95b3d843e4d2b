"""CUDA pooling: max and average pooling over windows and adaptive average pooling, one
thread an output element, NCHW or NHWC.

The window geometry and torch's bounds (padding, dilation, `ceil_mode`, the divisor of
`count_include_pad`) are the CPU template's (`cuvil.targets.cpu.templates.pool`); each thread
reduces its own window, so no thread writes another's element.
"""

from __future__ import annotations

from cuvil.ir.types import NHWC
from cuvil.lower.physical import np_name
from cuvil.lower.spec import KernelSpec, Unsupported
from cuvil.targets.cpu.templates.elementwise import literal
from cuvil.targets.cpu.templates.pool import _avg_divisor, _geometry
from cuvil.targets.cuda.templates.elementwise import FLOATS, device_text, grid_loop, output_indices

POOLS = ("max_pool2d", "avg_pool2d", "adaptive_avg_pool2d")


def generate(group, ctx) -> KernelSpec:
    nodes = group.node_list(ctx)
    if len(nodes) != 1 or nodes[0].op not in POOLS:
        raise Unsupported("CUDA pool kernels take one pooling op")
    node = nodes[0]
    x = ctx.type(node.inputs[0])
    if node.type.dtype not in FLOATS or x.dtype != node.type.dtype:
        raise Unsupported(f"{node.op} on {x.dtype}")
    if x.layout != node.type.layout:
        raise Unsupported(f"{node.op} that changes layout")
    phys, logical = output_indices(node.type)
    nhwc = x.layout == NHWC
    n, c, i, j = (logical[d] for d in range(4))
    pixel = (f"x0[{n}, hh, ww, {c}]" if nhwc else f"x0[{n}, {c}, hh, ww]")
    head = ["h = x0.shape[1]", "w = x0.shape[2]"] if nhwc else \
        ["h = x0.shape[2]", "w = x0.shape[3]"]
    if node.op == "adaptive_avg_pool2d":
        body = _adaptive(i, j, pixel, node.type.dtype, nhwc)
    else:
        body = _window(node, i, j, pixel)
    lines = head + grid_loop(4, [*body, f"out[{', '.join(phys)}] = acc"])
    return KernelSpec("pool", ["x0", "out"], [node.inputs[0], node.name], device_text(lines),
                      parallel=False)


def _window(node, i: str, j: str, pixel: str) -> list[str]:
    """`acc`: the max or the average over the output element's window, as torch bounds it."""
    kh, kw, sh, sw, ph, pw, dh, dw = _geometry(node)
    dtype = node.type.dtype
    is_max = node.op == "max_pool2d"
    step = f"acc = vmaximum({pixel}, acc)" if is_max else f"acc += {pixel}"  # NaN kept
    lines = [f"hs = {i} * {sh} - {ph}", f"ws = {j} * {sw} - {pw}",
             f"acc = {literal(float('-inf') if is_max else 0, dtype)}",
             f"for a in range({kh}):",
             f"    hh = hs + a * {dh}",
             "    if hh >= 0 and hh < h:",
             f"        for b in range({kw}):",
             f"            ww = ws + b * {dw}",
             "            if ww >= 0 and ww < w:",
             f"                {step}"]
    if not is_max:
        lines += [f"he = hs + {kh}", f"we = ws + {kw}", *_avg_divisor(node, dtype),
                  "acc = acc / count"]
    return lines


def _adaptive(i: str, j: str, pixel: str, dtype, nhwc: bool) -> list[str]:
    """`acc`: the mean over torch's adaptive window of output element (i, j)."""
    oh, ow = ("out.shape[1]", "out.shape[2]") if nhwc else ("out.shape[2]", "out.shape[3]")
    return [f"h0 = ({i} * h) // {oh}", f"h1 = (({i} + 1) * h + {oh} - 1) // {oh}",
            f"w0 = ({j} * w) // {ow}", f"w1 = (({j} + 1) * w + {ow} - 1) // {ow}",
            f"acc = {literal(0, dtype)}",
            "for hh in range(h0, h1):", "    for ww in range(w0, w1):",
            f"        acc += {pixel}",
            f"acc = acc / {np_name(dtype)}((h1 - h0) * (w1 - w0))"]
