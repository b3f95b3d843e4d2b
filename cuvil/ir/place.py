"""`place_on`: a whole graph computed on one device, before the optimizer.

With one target whose device is not the host there is nothing to choose, so no rule
chooses it: every computing node is typed on that device. A constant is typed on the
device too: uploaded once, when the graph is built, it stays a constant that rules can
fold (a batch norm into its convolution's weight). Each input and each value made from
sizes alone is moved there by a `to_device`; a move the model makes itself is dropped; and
each output is moved back to the host, where a call's results are. Scalars (weak numbers)
stay where they are: they take the device of the tensors they meet. The optimizer then
sees a graph on the device, its rules and costs are that device's, and lowering emits that
device's kernels; a node the device has no kernel for is lowering's fallback
(`cuvil/lower/devices.py`). A moved value keeps the facts its source has (`Graph.facts`:
calibration's, `half_ok`): the copy holds the same values.
"""

from __future__ import annotations

from dataclasses import replace

from cuvil.ir.devices import HOST
from cuvil.ir.graph import Graph, Node
from cuvil.ir.structure import map_names

MOVE = "to_device"
OUT = "out"  # the attribute in which an opaque op (`torch_op`) records its type


def place_on(graph: Graph, device: str) -> Graph:
    """`graph` computed on `device` (see the module docstring); `graph` itself when
    `device` is the host."""
    if device == HOST:
        return graph
    placed = graph.copy()
    placed.nodes, placed.inputs = {}, []
    moved: dict[str, str] = {}  # a value on the host -> its copy on the device
    for node in graph:
        inputs = tuple(moved.get(i, i) for i in node.inputs)
        if node.op == MOVE:  # the model's own move: its value is on the device already
            moved[node.name] = inputs[0]
            continue
        if node.op == "const":  # lives on the device: uploaded once, a constant there
            placed.nodes[node.name] = _on(node, (), device)
            continue
        if not node.inputs:  # inputs and values made from sizes: on the host, moved
            _keep(placed, node)
            if node.op != "scalar":
                moved[node.name] = placed.add(MOVE, [node.name], {"device": device},
                                              name=placed.fresh(f"{node.name}_{device}"))
                if node.name in graph.facts:
                    placed.facts[moved[node.name]] = graph.facts[node.name]
            continue
        placed.nodes[node.name] = _on(node, inputs, device)
    back = {v: _move_back(placed, moved.get(v, v)) for v in graph.outputs}
    placed.output_structure = map_names(graph.output_structure, back.__getitem__)
    placed.mutations = {x: back[v] for x, v in graph.mutations.items()}
    placed.report = graph.report
    return placed.verify()


def _on(node: Node, inputs: tuple[str, ...], device: str) -> Node:
    """`node` reading `inputs`, typed on `device` (an opaque op's recorded type too)."""
    typed = node.type.with_(device=device)
    attrs = {**node.attrs, "out": str(typed)} if OUT in node.attrs else node.attrs
    return replace(node, inputs=inputs, type=typed, attrs=attrs)


def _keep(placed: Graph, node: Node) -> None:
    placed.nodes[node.name] = node
    if node.op == "input":
        placed.inputs.append(node.name)


def _move_back(placed: Graph, value: str) -> str:
    """`value` on the host: itself if it is there (a scalar), else a `to_device` back."""
    if placed[value].type.device == HOST:
        return value
    return placed.add(MOVE, [value], {"device": HOST}, name=placed.fresh(f"{value}_{HOST}"))
