"""Whole-array moves as plain numpy code: transposes, slices, selects, broadcasts,
`cat` and `embedding`. They need no compiling (a Numba kernel costs 0.3-1 s to compile
here) and numpy's strided copy is as fast as a serial loop.

A single movement op becomes `np.copyto(out, <view of the input>)`; views are taken on the
physical arrays, so a layout conversion (`to_layout` NCHW -> NHWC) is one transpose-copy.
"""

from __future__ import annotations

from cuvil.lower.physical import dim_code, is_identity_layout, layout_perm
from cuvil.lower.templates.spec import KernelSpec, Unsupported
from cuvil.ops.reduce import norm_dims

MOVES = {"permute", "transpose", "to_layout", "slice", "select", "expand"}


def generate(group, ctx) -> KernelSpec:
    nodes = group.node_list(ctx)
    if len(nodes) != 1:
        raise Unsupported("movement kernels take one op")
    node = nodes[0]
    if node.op == "cat":
        d = norm_dims(node.attrs["dim"], node.type.rank, "cat")[0]
        params = [f"x{i}" for i in range(len(node.inputs))]
        body = [f"np.concatenate(({', '.join(params)},), axis={d}, out=out)"]
        return _spec("concat", params, [*node.inputs, node.name], body)
    if node.op == "embedding":
        body = ["if x1.size and (x1.min() < 0 or x1.max() >= x0.shape[0]):",
                "    raise IndexError('embedding: index out of range')",
                "np.take(x0, x1, axis=0, out=out)"]
        return _spec("gather", ["x0", "x1"], [*node.inputs, node.name], body)
    view = move_view(node, ctx)
    if view is None:
        raise Unsupported(f"no numpy form for {node.op}")
    return _spec("copy", ["x0"], [node.inputs[0], node.name], [f"np.copyto(out, {view})"])


def is_move(group, ctx) -> bool:
    nodes = group.node_list(ctx)
    return len(nodes) == 1 and nodes[0].op in MOVES and move_view(nodes[0], ctx) is not None


def move_view(node, ctx) -> str | None:
    """A numpy view of input `x0` (physical) whose elements are the output's, or None."""
    t = ctx.type(node.inputs[0])
    perm_in, perm_out = layout_perm(t), layout_perm(node.type)
    a = node.attrs
    if node.op in ("permute", "transpose", "to_layout"):
        if node.op == "to_layout":
            order = list(range(t.rank))
        elif node.op == "permute":
            order = [d % t.rank for d in a["dims"]]
        else:
            d0, d1 = (norm_dims(a[k], t.rank, "transpose")[0] for k in ("dim0", "dim1"))
            order = list(range(t.rank))
            order[d0], order[d1] = d1, d0
        axes = tuple(perm_in.index(order[q]) for q in perm_out)
        return "x0" if axes == tuple(range(t.rank)) else f"x0.transpose({axes})"
    if not is_identity_layout(t) or not is_identity_layout(node.type):
        return None
    if node.op == "slice":
        d = norm_dims(a["dim"], t.rank, "slice")[0]
        end = "" if a["end"] is None else dim_code(a["end"])
        step = "" if a["step"] == 1 else f":{a['step']}"
        return "x0[" + ":, " * d + f"{a['start']}:{end}{step}]"
    if node.op == "select":
        d = norm_dims(a["dim"], t.rank, "select")[0]
        return "x0[" + ":, " * d + f"{a['index']}]"
    if node.op == "expand":
        return "x0"  # np.copyto broadcasts like expand
    return None


def _spec(template: str, params, args, body) -> KernelSpec:
    return KernelSpec(template, [*params, "out"], args, body, parallel=False, python=True)
