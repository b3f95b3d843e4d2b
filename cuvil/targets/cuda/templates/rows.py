"""CUDA row kernels: softmax, log-softmax, layer norm (its rstd, its input gradient) and
sum/mean/amax/var over trailing dims, one thread a row (grid-stride), with the CPU template's
per-row code (`cuvil.targets.cpu.templates.reduction`) spelled for the device; sum/mean/amax
over other dims and softmax / log-softmax along another dim, one thread an output element."""

from __future__ import annotations

from cuvil.ir.types import DType, is_static
from cuvil.lower.physical import np_name
from cuvil.lower.spec import KernelSpec, Unsupported
from cuvil.targets.cpu.templates.elementwise import literal
from cuvil.targets.cpu.templates.loops import indent
from cuvil.targets.cpu.templates.reduction import _ROW, reduced_dims
from cuvil.targets.cuda.templates.elementwise import (
    FLOATS,
    device_text,
    element,
    grid_loop,
    output_indices,
)

KEEPS_SHAPE = ("softmax", "log_softmax", "layer_norm", "layer_norm_grad")
REDUCTIONS = ("sum", "mean", "amax")


def generate(group, ctx) -> KernelSpec:
    nodes = group.node_list(ctx)
    if len(nodes) != 1 or nodes[0].op not in _ROW:
        raise Unsupported("CUDA row kernels take one softmax, layer norm or reduction")
    node = nodes[0]
    x = ctx.type(node.inputs[0])
    if node.type.dtype not in FLOATS:
        raise Unsupported("CUDA row kernels compute floats")
    dims = reduced_dims(node, x.rank)
    if not dims or list(dims) != list(range(dims[0], dims[-1] + 1)) or not all(
            is_static(d) and d == 1 for d in x.shape[dims[-1] + 1:]):
        if node.op in REDUCTIONS:
            return _any_dims(node, x.rank, dims)
        if node.op in ("softmax", "log_softmax") and len(dims) == 1:
            return _softmax_along(node, x.rank, dims[0])
        raise Unsupported(f"{node.op} over dims that are not the trailing ones")
    lo, hi = dims[0], dims[-1] + 1
    shape = [f"x0.shape[{i}]" for i in range(x.rank)]
    prod = lambda ds: " * ".join(ds) or "1"  # noqa: E731
    view = [f"nr = {prod(shape[:lo])}", f"rl = {prod(shape[lo:hi])}",
            "x = x0.reshape((nr, rl))",
            "o = out.reshape((nr, rl))" if node.op in KEEPS_SHAPE else "o = out.reshape((nr,))"]
    params, args = ["x0"], [node.inputs[0]]
    if node.op == "layer_norm":
        view += ["w = x1.reshape((rl,))", "b = x2.reshape((rl,))"]
        params, args = ["x0", "x1", "x2"], [*node.inputs[:3]]
    if node.op == "layer_norm_grad":
        view += ["xv = x1.reshape((nr, rl))", "mu = x2.reshape((nr,))",
                 "rs = x3.reshape((nr,))", "w = x4.reshape((rl,))"]
        params, args = ["x0", "x1", "x2", "x3", "x4"], [*node.inputs[:5]]
    acc: DType = node.type.dtype
    per_row = _ROW[node.op](node, acc)
    if any("fr" in ln for ln in per_row):
        view.append(f"fr = {np_name(acc)}(rl)")
    body = view + ["r = cuda.grid(1)", "while r < nr:", *indent(per_row, 1),
                   "    r += cuda.gridsize(1)"]
    return KernelSpec("rows", [*params, "out"], [*args, group.output], device_text(body),
                      parallel=False, fastmath="rows")


def _any_dims(node, rank: int, dims: tuple[int, ...]) -> KernelSpec:
    """`sum`, `mean` or `amax` over any dims: a thread an output element, walking the
    reduced dims' elements by a flat counter (amax keeps NaN, as torch does)."""
    phys, logical = output_indices(node.type)
    kept = [d for d in range(rank) if d not in dims]
    at = {d: logical[d if node.attrs.get("keepdim") else k] for k, d in enumerate(kept)}
    cast = np_name(node.type.dtype)
    count = " * ".join(f"x0.shape[{d}]" for d in dims) or "1"
    split = []
    for d in reversed(dims):
        split += [f"    i{d} = f % x0.shape[{d}]", f"    f = f // x0.shape[{d}]"]
        at[d] = f"i{d}"
    value = element("x0", [at[d] for d in range(rank)])
    is_max = node.op == "amax"
    step = f"acc = vmaximum({value}, acc)" if is_max else f"acc += {value}"
    lines = [f"acc = {literal(float('-inf'), node.type.dtype) if is_max else cast + '(0)'}",
             f"for r in range({count}):", "    f = r", *split, f"    {step}"]
    if node.op == "mean":
        lines.append(f"acc = acc / {cast}({count})")
    body = grid_loop(node.type.rank, [*lines, f"{element('out', phys)} = acc"])
    return KernelSpec("rows", ["x0", "out"], [node.inputs[0], node.name], body,
                      parallel=False, note=f"{node.op} over dims {list(dims)}")


def _softmax_along(node, rank: int, d: int) -> KernelSpec:
    """softmax or log-softmax along a dim that is not the last: a thread an element, its
    line's max and sum of exponentials computed in the thread (a NaN in the line makes
    the line NaN, as in torch)."""
    phys, logical = output_indices(node.type)
    cast = np_name(node.type.dtype)
    line = element("x0", [("k" if e == d else logical[e]) for e in range(rank)])
    here = element("x0", [logical[e] for e in range(rank)])
    lines = [f"mx = {literal(float('-inf'), node.type.dtype)}",
             f"for k in range(x0.shape[{d}]):", f"    mx = vmaximum({line}, mx)",
             f"tot = {cast}(0)", f"for k in range(x0.shape[{d}]):",
             f"    tot += math.exp({line} - mx)",
             f"acc = ({here} - mx) - math.log(tot)" if node.op == "log_softmax" else
             f"acc = math.exp({here} - mx) / tot"]
    body = grid_loop(node.type.rank, [*lines, f"{element('out', phys)} = acc"])
    return KernelSpec("rows", ["x0", "out"], [node.inputs[0], node.name], body,
                      parallel=False, note=f"{node.op} along dim {d}")
