"""Whole-array moves as plain numpy code: transposes, slices, selects, flips, broadcasts,
`cat`, `embedding`, and `arange` (made from its size). They need no compiling (a Numba
kernel costs 0.3-1 s to compile here) and numpy's strided copy is as fast as a serial loop.

A single movement op becomes `copy_into(out, <view of the input>)` (`kernels.copies`:
numpy's copy, or torch's on its threads for a large one); views are taken on the physical
arrays, so a layout conversion (`to_layout` NCHW -> NHWC) is one transpose-copy.
"""

from __future__ import annotations

from cuvil.lower.dim_code import dim_code
from cuvil.lower.physical import is_identity_layout, layout_perm
from cuvil.lower.spec import KernelSpec, Unsupported
from cuvil.ops.reduce import norm_dims


def generate(group, ctx) -> KernelSpec:
    nodes = group.node_list(ctx)
    node = nodes[-1]
    if len(nodes) > 1 and node.op in ("cat", "embedding"):
        raise Unsupported(f"{node.op} takes one op")
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
    if node.op == "arange":
        return _spec("arange", [], [node.name], [arange_code(node)])
    view, symbols = chain_view(nodes, ctx)
    if view is None:
        raise Unsupported(f"no numpy form for {node.op}")
    params = ["x0", *(f"n_{s}" for s in symbols)]
    return _spec("copy", params, [nodes[0].inputs[0], *(f"#sym:{s}" for s in symbols),
                                  node.name], [f"copy_into(out, {view})"])


def is_move(group, ctx) -> bool:
    from cuvil.lower.group import is_move_chain

    return is_move_chain(group, ctx.graph) and chain_view(group.node_list(ctx), ctx)[0] \
        is not None


def chain_view(nodes, ctx) -> tuple[str | None, list[str]]:
    """A numpy expression over `x0` giving the last node's elements, and the symbols its
    reshapes use; None if some step has no numpy form."""
    from cuvil.lower.group import is_alias
    from cuvil.lower.physical import physical_shape

    expr, symbols = "x0", set()
    for k, node in enumerate(nodes):
        if node.op == "expand" and k < len(nodes) - 1:
            return None, []  # the copy broadcasts the last step only
        if is_alias(node.op):
            shape = physical_shape(node.type)
            symbols.update(str(s) for d in shape if not isinstance(d, int)
                           for s in d.free_symbols)
            dims = ", ".join(dim_code(d, {s: f"n_{s}" for s in symbols}) for d in shape)
            expr = f"{expr}.reshape(({dims},))"
            continue
        expr = move_view(node, ctx, expr)
        if expr is None:
            return None, []
    return expr, sorted(symbols)


def move_view(node, ctx, src: str = "x0") -> str | None:
    """A numpy view of `src` (the input's physical array) whose elements are the output's,
    or None."""
    t = ctx.type(node.inputs[0])
    perm_in, perm_out = layout_perm(t), layout_perm(node.type)
    a = node.attrs
    if node.op in ("permute", "transpose", "to_layout"):
        if t.rank == 0:
            return src  # torch transposes a 0-d value with dims 0 / -1: nothing moves
        if node.op == "to_layout":
            order = list(range(t.rank))
        elif node.op == "permute":
            order = [d % t.rank for d in a["dims"]]
        else:
            d0, d1 = (norm_dims(a[k], t.rank, "transpose")[0] for k in ("dim0", "dim1"))
            order = list(range(t.rank))
            order[d0], order[d1] = d1, d0
        axes = tuple(perm_in.index(order[q]) for q in perm_out)
        return src if axes == tuple(range(t.rank)) else f"{src}.transpose({axes})"
    if not is_identity_layout(t) or not is_identity_layout(node.type):
        return None
    if node.op == "slice":
        d = norm_dims(a["dim"], t.rank, "slice")[0]
        end = "" if a["end"] is None else dim_code(a["end"])
        step = "" if a["step"] == 1 else f":{a['step']}"
        return f"{src}[" + ":, " * d + f"{a['start']}:{end}{step}]"
    if node.op == "flip":
        return f"np.flip({src}, {norm_dims(tuple(a['dims']), t.rank, 'flip')})"
    if node.op == "select":
        d = norm_dims(a["dim"], t.rank, "select")[0]
        return f"{src}[" + ":, " * d + f"{a['index']}]"
    if node.op == "expand":
        return src  # the copy broadcasts src like expand
    return None


def arange_code(node) -> str:
    """`arange` into `out`: start + step * i, in f64 (i64 for integers) as torch's CPU
    kernel accumulates, stored in out's dtype."""
    a = node.attrs
    wide = "np.float64" if node.type.dtype.is_float else "np.int64"
    return (f"out[...] = np.arange(out.shape[0], dtype={wide}) * {wide}({a['step']!r}) + "
            f"{wide}({a['start']!r})")


def _spec(template: str, params, args, body) -> KernelSpec:
    return KernelSpec(template, [*params, "out"], args, body, parallel=False, python=True)
