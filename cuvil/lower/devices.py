"""Lowering over several targets: which target lowers each group, and device boundaries.

Partitioning (`cuvil.lower.group`) groups the nodes whose values all live on one device
alike on every device; a node whose values span devices (a `to_device`, a host scalar
read on a device) comes out of it as a fallback group with a device reason.
`place_groups` classifies those groups: a `to_device` that changes devices becomes a
`transfer` (a copy between the host and the device), every other node takes its kernel
family, and chains of elementwise nodes on the device are fused into one group.
`Targets` maps each device to the first target given for it; the CPU runs what no target
takes (`fallback_policy="cpu"`: an op a device target has no kernel for runs through its
torch reference on the host, its operands copied there and back, and the report lists it).
"""

from __future__ import annotations

from collections.abc import Sequence

from cuvil.errors import CuvilError
from cuvil.ir.devices import HOST, device_target
from cuvil.ir.graph import Graph
from cuvil.lower.group import Group, family, is_alias
from cuvil.lower.target import Target, get_target

DEVICE_REASON = "device "  # how partitioning says a node is not the CPU's
POLICIES = ("cpu", "error")


class Targets:
    """The targets of one compile, by the device whose values each computes."""

    def __init__(self, targets: str | Target | Sequence[str | Target], policy: str = "cpu"):
        if policy not in POLICIES:
            raise CuvilError(f"fallback_policy must be one of {', '.join(POLICIES)}, "
                             f"not {policy!r}")
        items = [targets] if isinstance(targets, str | Target) else list(targets)
        self.ordered = [get_target(t) for t in items]
        self.primary, self.policy = self.ordered[0], policy
        self.by_device: dict[str, Target] = {}
        for t in self.ordered:
            self.by_device.setdefault(t.device, t)
        self.by_device.setdefault(HOST, get_target(device_target()[HOST]))

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.ordered]

    def host(self) -> Target:
        return self.by_device[HOST]

    def of(self, group: Group, graph: Graph) -> Target:
        """The target that lowers `group`: its device's (a transfer: the device side's)."""
        device = graph[group.output].type.device
        if group.template == "transfer" and device == HOST:
            device = graph[graph[group.output].inputs[0]].type.device
        if device not in self.by_device:
            raise CuvilError(f"no target computes device {device!r} "
                             f"(targets: {', '.join(self.names)})")
        return self.by_device[device]


def device_of(group: Group, graph: Graph) -> str:
    return graph[group.output].type.device


def is_transfer(node, graph: Graph) -> bool:
    return node.op == "to_device" and graph[node.inputs[0]].type.device != node.type.device


def place_groups(groups: list[Group], graph: Graph) -> list[Group]:
    """Each group classified for its device (see the module docstring)."""
    out = []
    for group in groups:
        node = graph[group.output]
        if is_transfer(node, graph):
            out.append(Group("transfer", [node.name], reason="copy between devices"))
        elif group.template == "fallback" and group.reason.startswith(DEVICE_REASON):
            kind, why = device_kind(node)
            out.append(Group(kind, list(group.nodes), reason=why))
        else:
            out.append(group)
    return fuse_device_chains(out, graph)


def device_kind(node) -> tuple[str, str]:
    """(template, reason) of a node on a device other than the host."""
    kind = family(node.op)
    if is_alias(node.op):
        return "alias", ""
    if kind == "move" or node.op == "to_layout":
        return "elementwise", ""
    if node.op == "torch_op" or kind in ("fallback", "composite"):
        return "fallback", f"no kernel for {node.op} on device {node.type.device}"
    return kind, ""


def fuse_device_chains(groups: list[Group], graph: Graph) -> list[Group]:
    """Merge a device elementwise or GEMM group with the elementwise group that is its only
    reader, when its value is not a graph output: one kernel (a GEMM with an epilogue), no
    intermediate array."""
    readers: dict[str, set[str]] = {}
    for node in graph:
        for i in node.inputs:
            readers.setdefault(i, set()).add(node.name)
    outputs = set(graph.outputs)
    owner: dict[str, Group] = {}
    kept: list[Group] = []
    for group in groups:
        merged = group
        if _device_elementwise(group, graph):
            for value in _inputs(merged, graph):
                src = owner.get(value)
                if (src is not None and src is not merged and _fusable_into(src, graph)
                        and value not in outputs and readers.get(value, set()) <= set(merged.nodes)
                        and src.output == value):
                    kept.remove(src)
                    merged = Group(src.template, [*src.nodes, *merged.nodes],
                                   fused=[*src.nodes, *merged.nodes])
        kept.append(merged)
        for n in merged.nodes:
            owner[n] = merged
    return kept


def _inputs(group: Group, graph: Graph) -> list[str]:
    inside = set(group.nodes)
    return [i for n in group.nodes for i in graph[n].inputs if i not in inside]


def _fusable_into(src: Group, graph: Graph) -> bool:
    """An elementwise group, or a GEMM or a convolution (its epilogue), on a device."""
    return _device_elementwise(src, graph) or (
        src.template in ("gemm", "conv") and device_of(src, graph) != HOST)


def _device_elementwise(group: Group, graph: Graph) -> bool:
    return group.template == "elementwise" and device_of(group, graph) != HOST
