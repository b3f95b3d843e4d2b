"""CUDA `cat`, `embedding` and `arange`, one thread an output element, from the same op
definitions as the CPU's numpy forms (`cuvil.targets.cpu.templates.movement`).

`cat` finds the input holding its element by walking the inputs' extents along `dim`;
`embedding` reads its row of the weight at the index (not checked on the device: a kernel
cannot raise); `arange` computes `start + step * i` in f64 (i64 for integers), as torch's
CPU kernel does, stored in the output's dtype.
"""

from __future__ import annotations

from cuvil.lower.physical import layout_perm, np_name
from cuvil.lower.spec import KernelSpec, Unsupported
from cuvil.ops.reduce import norm_dims
from cuvil.targets.cpu.templates.loops import indent
from cuvil.targets.cuda.templates.elementwise import element, grid_loop, output_indices

FAMILY = {"cat": "concat", "embedding": "gather", "arange": "source"}


def generate(group, ctx) -> KernelSpec:
    nodes = group.node_list(ctx)
    node = nodes[-1]
    if len(nodes) != 1 or node.op not in FAMILY:
        raise Unsupported(f"{node.op} takes one op")
    if node.type.rank == 0 or any(layout_perm(t) != tuple(range(t.rank)) for t in
                                  [node.type, *(ctx.type(i) for i in node.inputs)]):
        raise Unsupported(f"{node.op} reads and writes logical order, rank 1 or more")
    phys, logical = output_indices(node.type)
    at = [logical[d] for d in range(node.type.rank)]
    lines = (_cat(node, at) if node.op == "cat" else _embedding(at) if node.op == "embedding"
             else _arange(node, at))
    params = [f"x{i}" for i in range(len(node.inputs))]
    body = grid_loop(node.type.rank, [*lines, f"out[{', '.join(phys)}] = value"])
    return KernelSpec(FAMILY[node.op], [*params, "out"], [*node.inputs, node.name], body,
                      parallel=False)


def _cat(node, at: list[str]) -> list[str]:
    """`value`: the element at `at` of the input whose extent along `dim` holds it, the
    extents of the inputs before it taken off (nested, so every path sets `value`)."""
    d = norm_dims(node.attrs["dim"], node.type.rank, "cat")[0]
    point = ", ".join("k" if e == d else a for e, a in enumerate(at))
    last = len(node.inputs) - 1
    lines = [f"value = x{last}[{point}]"]
    for i in range(last - 1, -1, -1):
        lines = [f"if k < x{i}.shape[{d}]:", f"    value = x{i}[{point}]", "else:",
                 f"    k -= x{i}.shape[{d}]", *indent(lines, 1)]
    return [f"k = {at[d]}", *lines]


def _embedding(at: list[str]) -> list[str]:
    return [f"row = {element('x1', at[:-1])}", f"value = x0[row, {at[-1]}]"]


def _arange(node, at: list[str]) -> list[str]:
    a = node.attrs
    wide = "np.float64" if node.type.dtype.is_float else "np.int64"
    return [f"value = {np_name(node.type.dtype)}({wide}({a['start']!r}) + "
            f"{wide}({a['step']!r}) * {wide}({at[0]}))"]
