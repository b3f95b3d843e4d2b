"""An f32 add/sub/mul of two arrays, each read in any dim order or broadcast and scaled by
constants, as one call of the library kernel `runtime.mapped.binary_mapped`: no kernel is
generated for it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from cuvil.ir.graph import Node
from cuvil.ir.types import DType, TensorType
from cuvil.lower.physical import layout_perm
from cuvil.lower.spec import THREADS, KernelSpec
from cuvil.ops import registry
from cuvil.targets.cpu.templates.loops import BCAST, FULL, Operand

if TYPE_CHECKING:
    from cuvil.targets.cpu.templates.elementwise import Expr

RANK = 4  # `runtime.mapped`'s padded rank
MAPPED_OPS = {"add": 0, "sub": 1, "mul": 2}  # `runtime.mapped.binary_mapped`'s op codes


def mapped_binary(nodes: list[Node], expr: Expr, out: TensorType, output: str,
                   ctx) -> KernelSpec | None:
    """An f32 add/sub/mul of two arrays, each read in any dim order or broadcast and
    scaled by constants (moves and products with a scalar before it only), as
    `runtime.mapped.binary_mapped` itself: nothing generated."""
    last, scales = nodes[-1], _scalings(nodes[:-1], ctx)
    if last.op not in MAPPED_OPS or len(expr.operands) != 2 or out.rank > RANK or \
            out.dtype is not DType.f32 or layout_perm(out) != tuple(range(out.rank)) or \
            any(registry.get(n.op).lowering not in ("move", "alias") and n.name not in scales
                for n in nodes[:-1]) or \
            any(ctx.type(v).dtype is not DType.f32 for v in expr.args) or \
            any(ax.kind not in (FULL, BCAST) for op in expr.operands for ax in op.axes):
        return None
    (first, f0), (_, f1) = (_source(v, nodes[:-1], scales) for v in last.inputs)
    if expr.args[0] == expr.args[1] and (last.op == "sub" or f0 != f1):
        return None  # which load is the first operand is not told by its value
    order = (0, 1) if expr.args[0] == first else (1, 0)
    maps = [_axis_map(expr.operands[i], out) for i in order]
    names = [ctx.prepare(f"mapped.map.{'.'.join(map(str, m))}", np.array(m, np.int64))
             for m in maps]
    mode = ctx.prepare(f"mapped.{MAPPED_OPS[last.op]}.{ctx.par_min}",
                       np.array([MAPPED_OPS[last.op], ctx.par_min], np.int64))
    scale = ctx.prepare(f"mapped.scale.{f0!r}.{f1!r}", np.array([f0, f1], np.float32))
    return KernelSpec("elementwise", ["a", "amap", "b", "bmap", "mode", "scale", "parts", "out"],
                      [expr.args[order[0]], names[0], expr.args[order[1]], names[1], mode,
                       scale, THREADS, output], [], note=f"{last.op} through axis maps",
                      library="binary_mapped")


def _scalings(nodes: list[Node], ctx) -> dict[str, tuple[str, float]]:
    """The group's products of an array with a constant scalar: node -> (array, factor)."""
    out = {}
    for n in nodes:
        if n.op == "mul" and len(n.inputs) == 2:
            values = [ctx.scalar_value(v) for v in n.inputs]
            for k in (0, 1):
                if values[k] is not None and values[1 - k] is None:
                    out[n.name] = (n.inputs[1 - k], float(values[k]))
    return out


def _source(value: str, moves: list[Node],
            scales: dict[str, tuple[str, float]]) -> tuple[str, float]:
    """The array a chain of the group's moves and scalings ending in `value` reads, and
    the product of the chain's factors."""
    by_name, factor = {n.name: n for n in moves}, 1.0
    while value in by_name:
        if value in scales:
            value, f = scales[value]
            factor *= f
        else:
            value = by_name[value].inputs[0]
    return value, factor


def _axis_map(operand: Operand, out: TensorType) -> list[int]:
    """For each dim of `out` padded in front to rank 4: the operand's axis following it,
    or -1."""
    follow = {ax.out: k for k, ax in enumerate(operand.axes) if ax.kind == FULL}
    pad = RANK - out.rank
    return [-1 if p < pad else follow.get(p - pad, -1) for p in range(RANK)]
