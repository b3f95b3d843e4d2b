"""f16 operands of an f32 product: the f16 layers of `fp16.cvr` cast their operands to f32
inside their bodies (the accumulation is f32), and grouping keeps those casts at the head
of the GEMM or convolution group (`cuvil.lower.group.widening_casts`). The kernel reads
each such operand as the f16 array it is and widens every element as it loads it, so the
products and their sum are f32; no f32 copy of an operand is written."""

from __future__ import annotations

from cuvil.ir.types import DType
from cuvil.lower.group import widening_casts
from cuvil.lower.physical import np_name


def sources(group, ctx) -> dict[str, str]:
    """The group's widening casts, each to the f16 value it reads."""
    names = [n.name for n in group.node_list(ctx)]
    return {c: ctx.graph[c].inputs[0] for c in widening_casts(ctx.graph, names)}


def load(element: str, widened: bool, acc_dtype) -> str:
    """`element` of an operand as the product computes it: widened to `acc_dtype` when
    the operand is f16."""
    return f"{np_name(acc_dtype)}({element})" if widened else element


def is_widened(ctx, operand: str) -> bool:
    """Whether the product's operand `operand` is a cast of an f16 value to f32 (read as
    f16 when the cast heads the group; widening an f32 value again changes nothing)."""
    node = ctx.graph[operand]
    return node.op == "cast" and ctx.type(node.inputs[0]).dtype is DType.f16
