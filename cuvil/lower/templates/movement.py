"""Kernels that move whole slices: `cat` (concatenation) and `embedding` (row gather).

Single-element movement (`permute`, `transpose`, `slice`, `select`, `expand`, `to_layout`)
is handled by the elementwise template's index maps, where it can fuse with arithmetic.
"""

from __future__ import annotations

from cuvil.lower.templates.loops import indent
from cuvil.lower.templates.spec import KernelSpec, Unsupported
from cuvil.ops.reduce import norm_dims


def generate(group, ctx) -> KernelSpec:
    nodes = group.node_list(ctx)
    if len(nodes) != 1:
        raise Unsupported("movement kernels take one op")
    node = nodes[0]
    if node.op == "cat":
        return _cat(node, ctx)
    if node.op == "embedding":
        return _embedding(node, ctx)
    raise Unsupported(f"no movement kernel for {node.op}")


def _cat(node, ctx) -> KernelSpec:
    t = node.type
    d = norm_dims(node.attrs["dim"], t.rank, "cat")[0]
    params = [f"x{i}" for i in range(len(node.inputs))]
    lines = ["off = 0"]
    for p in params:
        index = ", ".join([":"] * d + [f"off:off + {p}.shape[{d}]"])
        lines += [f"out[{index}] = {p}", f"off += {p}.shape[{d}]"]
    return KernelSpec("concat", [*params, "out"], [*node.inputs, node.name], lines,
                      parallel=False)


def _embedding(node, ctx) -> KernelSpec:
    lines = ["vocab = x0.shape[0]", "width = x0.shape[1]", "idx = x1.reshape((x1.size,))",
             "o = out.reshape((x1.size, width))", "for i in range(idx.size):"]
    lines += indent(["row = idx[i]", "if row < 0 or row >= vocab:",
                     "    raise IndexError('embedding: index out of range')",
                     "for j in range(width):", "    o[i, j] = x0[row, j]"], 1)
    return KernelSpec("gather", ["x0", "x1", "out"], [*node.inputs, node.name], lines,
                      parallel=False)
