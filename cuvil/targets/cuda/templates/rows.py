"""CUDA row kernels: softmax, log-softmax, layer norm and sum/mean/amax over trailing dims,
one thread a row (grid-stride), with the CPU template's per-row code
(`cuvil.targets.cpu.templates.reduction`) spelled for the device."""

from __future__ import annotations

from cuvil.ir.types import DType, is_static
from cuvil.lower.physical import np_name
from cuvil.lower.spec import KernelSpec, Unsupported
from cuvil.targets.cpu.templates.loops import indent
from cuvil.targets.cpu.templates.reduction import _ROW, reduced_dims
from cuvil.targets.cuda.templates.elementwise import FLOATS, device_text

KEEPS_SHAPE = ("softmax", "log_softmax", "layer_norm")


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
    acc: DType = node.type.dtype
    per_row = _ROW[node.op](node, acc)
    if any("fr" in ln for ln in per_row):
        view.append(f"fr = {np_name(acc)}(rl)")
    body = view + ["r = cuda.grid(1)", "while r < nr:", *indent(per_row, 1),
                   "    r += cuda.gridsize(1)"]
    return KernelSpec("rows", [*params, "out"], [*args, group.output], device_text(body),
                      parallel=False, fastmath="rows")
