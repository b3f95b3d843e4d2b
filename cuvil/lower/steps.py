"""Each call of the generated `entry` mapped back to the optimized graph's nodes.

Lowering renames and adds values: a composite node becomes the primitive nodes of its
body (fresh names, remembered as an instance), a `to_layout` is inserted before an op
that needs logical order, a view chain is cloned for each move. A runtime trace times
steps, and a graph dump colours nodes, so each step names the optimized graph node its
time counts for: the composite node it lowers, else the node that owns its output value.
"""

from __future__ import annotations

from cuvil.ir.graph import Graph
from cuvil.lower.report import StepReport


def step_reports(program, ctx, graph: Graph) -> list[StepReport]:
    """One `StepReport` per step of `program` (lowered with `ctx`) of the optimized `graph`."""
    owners = _Owners(ctx, set(graph.nodes))
    templates = {k.name: k.spec.template for k in program.kernels}
    reports = []
    for step in program.steps:
        if step.group is None:  # a copy of an output that is an input, constant or view
            source = owners.owner(step.args[0])
            reports.append(StepReport("copy", "copy", "copy", "copy", step.args[-1], "",
                                      (source,) if source else ()))
            continue
        group = step.group
        node = group.instance or owners.owner(group.output)
        nodes = tuple(dict.fromkeys(o for n in group.nodes if (o := owners.owner(n))))
        name = step.kernel if step.kind == "kernel" else "fallback"
        template = templates.get(step.kernel, step.kind)
        reports.append(StepReport(step.kind, name, template, _op(group, ctx), group.output,
                                  node, nodes))
    return reports


def _op(group, ctx) -> str:
    if group.instance:
        return ctx.instances[group.instance].node.op
    node = ctx.graph[group.output]
    if node.op == "torch_op":
        return f"torch_op {node.attrs.get('target')}"
    return node.op


class _Owners:
    """The optimized graph node a lowered value belongs to."""

    def __init__(self, ctx, names: set[str]):
        self.names = names
        self.users = ctx.users
        self.instance_of = {m: name for name, inst in ctx.instances.items()
                            for m in inst.members}
        self.graph = ctx.graph

    def owner(self, value: str, depth: int = 0) -> str:
        """The instance holding `value`, `value` itself, or (for an inserted `to_layout`
        or a cloned view) the owner of its first reader; "" when there is none."""
        if value in self.instance_of:
            return self.instance_of[value]
        if value in self.names:
            return "" if self.graph[value].op == "scalar" else value
        readers = self.users.get(value, [])
        if not readers or depth > 64:
            return ""
        return self.owner(readers[0], depth + 1)
