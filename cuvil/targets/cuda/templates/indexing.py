"""CUDA scans and advanced indexing (`cumsum`, `diff`, `index`, `gather`), one thread an
output element, from the same op definitions as the CPU's numpy forms
(`cuvil.targets.cpu.templates.indexing`).

`cumsum` sums its element's prefix along `dim` in f64 (i64 for integers and bools, whose
result is i64), as torch's CPU kernel accumulates; `diff` of bools is `!=`. `index` wraps a
negative index once; indices are not checked on the device (a kernel cannot raise), so an
index out of range reads memory it should not, as an unchecked CUDA gather does.
"""

from __future__ import annotations

from cuvil.ir.types import DType
from cuvil.lower.physical import layout_perm, np_name
from cuvil.lower.spec import KernelSpec, Unsupported
from cuvil.ops.reduce import norm_dims
from cuvil.targets.cuda.templates.elementwise import grid_loop, output_indices


def generate(group, ctx) -> KernelSpec:
    nodes = group.node_list(ctx)
    if len(nodes) != 1:
        raise Unsupported(f"{nodes[-1].op} takes one op")
    node = nodes[0]
    if node.type.rank == 0:
        raise Unsupported(f"a 0-d {node.op}")
    if any(layout_perm(t) != tuple(range(t.rank))
           for t in [node.type, *(ctx.type(i) for i in node.inputs)]):
        raise Unsupported(f"{node.op} reads and writes logical order")
    phys, logical = output_indices(node.type)
    value = _VALUES.get(node.op)
    if value is None:
        raise Unsupported(f"no CUDA kernel for {node.op}")
    lines = value(node, [logical[d] for d in range(node.type.rank)], ctx)
    params = [f"x{i}" for i in range(len(node.inputs))]
    template = "scan" if node.op in ("cumsum", "diff") else "index"
    body = grid_loop(node.type.rank, [*lines, f"out[{', '.join(phys)}] = value"])
    return KernelSpec(template, [*params, "out"], [*node.inputs, node.name], body,
                      parallel=False)


def _cumsum(node, at: list[str], ctx) -> list[str]:
    d = norm_dims(node.attrs["dim"], node.type.rank, "cumsum")[0]
    wide = "np.float64" if node.type.dtype.is_float else "np.int64"
    point = ", ".join("k" if e == d else a for e, a in enumerate(at))
    return [f"acc = {wide}(0)", f"for k in range({at[d]} + 1):",
            f"    acc += {wide}(x0[{point}])", f"value = {np_name(node.type.dtype)}(acc)"]


def _diff(node, at: list[str], ctx) -> list[str]:
    d = norm_dims(node.attrs["dim"], node.type.rank, "diff")[0]
    nxt = ", ".join(f"{a} + 1" if e == d else a for e, a in enumerate(at))
    op = "!=" if node.type.dtype == DType.bool else "-"
    return [f"value = x0[{nxt}] {op} x0[{', '.join(at)}]"]


def _index(node, at: list[str], ctx) -> list[str]:
    """x0[:start, v1, v2, ..., rest]: the index tensors broadcast right-aligned over the
    picked dims (a size-1 dim of one read at 0), a negative index wrapped once."""
    start, ranks = node.attrs["start"], [ctx.type(i).rank for i in node.inputs[1:]]
    rest = ctx.type(node.inputs[0]).rank - start - len(ranks)
    npick = len(at) - start - rest
    lines, point = [], list(at[:start])
    for k, rk in enumerate(ranks, 1):
        where = [f"({at[start + npick - rk + e]} if x{k}.shape[{e}] != 1 else 0)"
                 for e in range(rk)]
        lines += [f"v{k} = x{k}[{', '.join(where)}]" if rk else f"v{k} = x{k}[()]",
                  f"if v{k} < 0:", f"    v{k} += x0.shape[{start + k - 1}]"]
        point.append(f"v{k}")
    return [*lines, f"value = x0[{', '.join(point + at[start + npick:])}]"]


def _gather(node, at: list[str], ctx) -> list[str]:
    d = norm_dims(node.attrs["dim"], node.type.rank, "gather")[0]
    point = ", ".join("k" if e == d else a for e, a in enumerate(at))
    return [f"k = x1[{', '.join(at)}]", f"value = x0[{point}]"]


_VALUES = {"cumsum": _cumsum, "diff": _diff, "index": _index, "gather": _gather}
