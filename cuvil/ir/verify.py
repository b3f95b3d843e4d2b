"""The IR verifier: every use defined before it, ops known, types agree with inference."""

from __future__ import annotations

from cuvil.errors import CuvilError, IRError
from cuvil.ir.devices import known_devices
from cuvil.ir.graph import Graph, Node, catalog
from cuvil.ir.types import DType


def verify(graph: Graph) -> None:
    """Raise `IRError` naming the first malformed node; return quietly otherwise."""
    registry = catalog()
    seen: set[str] = set()
    for node in graph:
        _check_node(graph, node, seen, registry)
        seen.add(node.name)
    for name in graph.inputs:
        if graph.nodes.get(name) is None or graph[name].op != "input":
            raise IRError(f"graph input {name!r} is not an input node")
    for name in graph.outputs:
        if name not in seen:
            raise IRError(f"output {name!r} is not defined")
    for name, value in graph.mutations.items():
        _check_write(graph, name, value)


def _check_write(graph: Graph, name: str, value: str) -> None:
    """A value written into an input has the input's shape and dtype."""
    if name not in graph.inputs:
        raise IRError(f"written input {name!r} is not a graph input")
    want, got = graph[name].type, graph[value].type
    if want.shape != got.shape or want.dtype != got.dtype:
        raise IRError(f"value {value!r} ({got}) written into input {name!r} ({want}) "
                      "differs in shape or dtype")


def _check_node(graph: Graph, node: Node, seen: set[str], registry) -> None:
    def fail(message: str) -> IRError:
        return IRError(f"node {node.where()}: {message}")

    for i in node.inputs:
        if i not in seen:
            cyc = i in graph.nodes
            raise fail(f"input {i!r} is " + ("used before it is defined (cycle?)" if cyc
                                             else "not defined"))
    if node.type.device not in known_devices():
        raise fail(f"unknown device {node.type.device!r}")
    if node.op == "input":
        return
    if node.op == "const":
        tensor = graph.constants.get(node.attrs.get("ref"))
        if tensor is None:
            raise fail(f"constant {node.attrs.get('ref')!r} is missing")
        if (tuple(tensor.shape) != node.type.shape
                or DType.from_torch(tensor.dtype) != node.type.dtype):
            raise fail(f"type {node.type} disagrees with its tensor {tuple(tensor.shape)}")
        return
    if not registry.exists(node.op, graph.defs):
        raise fail(f"unknown op {node.op!r}")
    try:
        registry.get(node.op, graph.defs).complete_attrs(node.attrs, where=node.op)
        inferred = registry.infer(node.op, [graph[i].type for i in node.inputs], node.attrs,
                                  node.source, graph.defs)
    except CuvilError as e:
        raise fail(str(e)) from None
    if inferred != node.type:
        raise fail(f"type {node.type} disagrees with inferred {inferred}")
