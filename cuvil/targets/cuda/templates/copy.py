"""CUDA copies of move chains: moves and the views between them (`transpose -> view ->
select -> transpose`, grouped by partitioning as one copy), one thread an output element.

Each thread walks the chain backwards from its output element, mapping a logical index of
each node's result to one of its input (a permutation, a fixed or strided index, a
broadcast dim read at 0, a reshape through the flat index over the static shapes), and
loads the first input's element through its layout. Values inside the chain are never
stored, so their layouts do not matter: views and moves are composed as the logical index
maps the op catalog defines.
"""

from __future__ import annotations

from cuvil.ir.types import is_static
from cuvil.lower.dim_code import dim_code
from cuvil.lower.group import is_alias
from cuvil.lower.physical import layout_perm
from cuvil.lower.spec import KernelSpec, Unsupported
from cuvil.ops.reduce import norm_dims
from cuvil.targets.cuda.templates.elementwise import grid_loop, output_indices


def generate(group, ctx) -> KernelSpec:
    nodes = group.node_list(ctx)
    out = nodes[-1].type
    if out.rank == 0:
        raise Unsupported("a 0-d move chain")
    symbols = sorted({str(s) for n in nodes for t in (n.type, ctx.type(n.inputs[0]))
                      for d in t.shape if not is_static(d) for s in d.free_symbols})
    phys, logical = output_indices(out)
    at, lines = [logical[d] for d in range(out.rank)], []
    for step, node in enumerate(reversed(nodes)):
        at, more = _input_index(node, ctx.type(node.inputs[0]), at, f"m{step}")
        lines += more
    source = ctx.type(nodes[0].inputs[0])
    load = ", ".join(at[d] for d in layout_perm(source)) if source.rank else "0"
    body = grid_loop(out.rank, [*lines, f"out[{', '.join(phys)}] = x0[{load}]"])
    return KernelSpec("elementwise", ["x0", *(f"n_{s}" for s in symbols), "out"],
                      [nodes[0].inputs[0], *(f"#sym:{s}" for s in symbols), group.output],
                      body, parallel=False, note="a move chain, copied")


def _input_index(node, t, at: list[str], name: str) -> tuple[list[str], list[str]]:
    """(the logical index of `node`'s input read at its result's index `at`, the lines
    computing it, variables prefixed `name`)."""
    a, rank = node.attrs, t.rank
    if is_alias(node.op) and node.op != "expand":
        return _reshape(t.shape, node.type.shape, at, name)
    if node.op in ("permute", "transpose"):
        order = list(range(rank))
        if node.op == "permute":
            order = [d % rank for d in a["dims"]]
        elif rank:
            d0, d1 = (norm_dims(a[k], rank, "transpose")[0] for k in ("dim0", "dim1"))
            order[d0], order[d1] = d1, d0
        src = [""] * rank
        for q, d in enumerate(order):
            src[d] = at[q]
        return src, []
    if node.op == "to_layout":
        return at, []
    if node.op == "select":
        d = norm_dims(a["dim"], rank, "select")[0]
        return [*at[:d], f"{a['index']} % {_code(t.shape[d])}", *at[d:]], []
    if node.op == "slice":
        d = norm_dims(a["dim"], rank, "slice")[0]
        if a["start"] < 0:
            raise Unsupported("a slice from the end in a CUDA move chain")
        start = a["start"]
        return [*at[:d], f"({start} + {a['step']} * {at[d]})", *at[d + 1:]], []
    if node.op == "expand":
        lead = node.type.rank - rank
        return [("0" if t.shape[e] == 1 != node.type.shape[e + lead] else at[e + lead])
                for e in range(rank)], []
    raise Unsupported(f"{node.op} in a CUDA move chain")


def _reshape(src: tuple, dst: tuple, at: list[str], name: str) -> tuple[list[str], list[str]]:
    """A reshape: the flat index of `at` over `dst`, split over `src`."""
    flat = " + ".join(f"{i} * ({_stride(dst, k)})" for k, i in enumerate(at)) or "0"
    lines = [f"{name} = {flat}"]
    index = [f"({name} // ({_stride(src, k)})) % ({_code(n)})" for k, n in enumerate(src)]
    return index, lines


def _stride(shape: tuple, k: int) -> str:
    return " * ".join(_code(n) for n in shape[k + 1:]) or "1"


def _code(d) -> str:
    """A dim as code, its symbols the kernel's `n_*` parameters."""
    return dim_code(d, {str(s): f"n_{s}" for s in getattr(d, "free_symbols", ())})
