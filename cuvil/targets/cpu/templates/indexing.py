"""Scans and advanced indexing as plain numpy code: `cumsum`, `diff`, `index`, `gather`. Like the
movement kernels they need no compiling; each is one numpy call over logical-order arrays.

`cumsum` accumulates a float in f64 and an integer or bool in i64, as torch's CPU kernel
does, and stores the result in out's dtype. `index` checks its indices against the indexed
dims (numpy raises IndexError as torch does) and wraps negative ones.
"""

from __future__ import annotations

from cuvil.lower.spec import KernelSpec, Unsupported
from cuvil.ops.reduce import norm_dims


def generate(group, ctx) -> KernelSpec:
    nodes = group.node_list(ctx)
    if len(nodes) != 1:
        raise Unsupported(f"{nodes[-1].op} takes one op")
    node = nodes[0]
    if node.op == "cumsum":
        rank = node.type.rank
        d = norm_dims(node.attrs["dim"], rank, "cumsum")[0] if rank else None  # 0-d: 1 value
        wide = "np.float64" if node.type.dtype.is_float else "np.int64"
        return _scan(node, f"np.cumsum(x0, axis={d}, dtype={wide}).reshape(out.shape)")
    if node.op == "diff":
        d = norm_dims(node.attrs["dim"], node.type.rank, "diff")[0]
        return _scan(node, f"np.diff(x0, axis={d})")
    if node.op == "index":
        params = [f"x{i}" for i in range(len(node.inputs))]
        key = ", ".join([":"] * node.attrs["start"] + params[1:])
        return _spec("index", params, [*node.inputs, node.name], [f"out[...] = x0[{key}]"])
    if node.op == "gather":
        return _spec("index", ["x0", "x1"], [*node.inputs, node.name], gather_code(node))
    raise Unsupported(f"no numpy form for {node.op}")


def gather_code(node) -> list[str]:
    """torch.gather: indices checked (no wrapping), x cut to index's extent off `dim`."""
    rank = node.type.rank
    if not rank:  # a 0-d gather takes index 0 only
        return ["if x1 != 0:", "    raise IndexError('gather: index out of range')",
                "out[...] = x0"]
    d = norm_dims(node.attrs["dim"], rank, "gather")[0]
    cut = ", ".join(":" if k == d else f":x1.shape[{k}]" for k in range(rank))
    return [f"if x1.size and (x1.min() < 0 or x1.max() >= x0.shape[{d}]):",
            "    raise IndexError('gather: index out of range')",
            f"out[...] = np.take_along_axis(x0[{cut}], x1, axis={d})"]


def _scan(node, expr: str) -> KernelSpec:
    """out = expr; NaN and inf pass through silently, as in torch (inf - inf is NaN)."""
    body = ["with np.errstate(all='ignore'):", f"    out[...] = {expr}"]
    return _spec("scan", ["x0"], [*node.inputs, node.name], body)


def _spec(template: str, params, args, body) -> KernelSpec:
    return KernelSpec(template, [*params, "out"], args, body, parallel=False, python=True)
