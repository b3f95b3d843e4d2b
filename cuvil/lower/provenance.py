"""What a kernel lowers, in words: one line per node with its op, source line and the
rules that made it, for the generated code's kernel headers (`kernel_header`) and the
compile report (`describe_group`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cuvil.ir.graph import Node

if TYPE_CHECKING:
    from cuvil.lower.codegen import Kernel


def kernel_header(kernel: Kernel, ctx) -> list[str]:
    """`# k0_gemm: ...` lines naming every node the kernel lowers, its source and rules."""
    lines = [f"# {kernel.name}: template {kernel.spec.template}"
             + (f" ({kernel.spec.note})" if kernel.spec.note else "")]
    for group in kernel.groups:
        for text in describe_group(group, ctx):
            lines.append(f"#   {text}")
    return lines


def describe_group(group, ctx) -> list[str]:
    """One line per node (or composite node) a group lowers: op, source line, rules."""
    nodes = [ctx.graph[n] for n in group.nodes if ctx.graph[n].op != "scalar"]
    instance = ctx.instances.get(group.instance)
    if instance is not None:
        nodes = [instance.node] + [n for n in nodes if n.name not in instance.members]
    return [describe_node(n, ctx.rule_where) for n in nodes]


def describe_node(node: Node, rule_where: dict[str, str]) -> str:
    text = f"{node.name} = {node.op}({', '.join(node.inputs)})"
    if node.source:
        text += f" at {node.source}"
    if node.origin:  # each rule once, in the order it first acted on the node's chain
        rules = [f"{r} ({rule_where[r]})" if r in rule_where else r
                 for r in dict.fromkeys(node.origin)]
        text += f"; rules: {', '.join(rules)}"
    return text
