"""Outputs that are reshapes of a kernel's result: the kernel writes the output array itself.

An output that is a view of another value gets an array of its own and a copy at the end of
the call (`codegen`), since an output is memory of its own. Where the view only reshapes
(`reshape`, `view`, `squeeze`, ...: row-major order kept) a value that a kernel writes and
nothing else returns, that kernel writes the output array instead, seen in its own shape,
and nothing is copied. The encoder layer's forward returns the q/k/v projection it
rearranges ([3, 64, 32, 1, 256]) squeezed for the backward: 6 MB a step, not copied.
"""

from __future__ import annotations

from cuvil.ir.devices import HOST
from cuvil.lower.physical import is_identity_layout
from cuvil.ops import registry
from cuvil.ops.registry import SHAPE


def output_roots(ctx, groups, outputs: list[str]) -> dict[str, str]:
    """{value a kernel writes: the output, a reshape of it, whose array it writes}."""
    group_of = {n: g for g in groups for n in g.nodes}
    roots: dict[str, str] = {}
    for out in dict.fromkeys(outputs):
        root = _reshaped(out, ctx, group_of)
        producer = group_of.get(root)
        if root == out or producer is None or producer.output != root or \
                producer.template in ("alias", "fallback") or root in outputs or \
                root in roots or not _plain(ctx.type(root)):
            continue
        roots[root] = out
    return roots


def _reshaped(value: str, ctx, group_of: dict) -> str:
    """The value `value` reshapes, through reshape-like views in row-major order."""
    while True:
        group = group_of.get(value)
        if group is None or group.template != "alias":
            return value
        node = ctx.graph[value]
        if not _plain(node.type) or not registry.exists(node.op) or \
                registry.get(node.op).kind != SHAPE:
            return value
        value = node.inputs[0]


def _plain(t) -> bool:
    return is_identity_layout(t) and t.device == HOST
