"""The structural hash identifies a computation: value names and the graph's name do not
matter, every op, attribute, type and wiring does."""

from __future__ import annotations

from dataclasses import replace

import pytest
from irgraphs import renamed, symbolic_graph

from cuvil.ir import TensorType


def test_hash_ignores_value_names_and_graph_name():
    graph = symbolic_graph("first")
    other = renamed(symbolic_graph("second"), "renamed_")
    assert other.to_text() != graph.to_text()
    assert other.structural_hash() == graph.structural_hash()


def test_hash_is_stable_across_builds():
    assert symbolic_graph().structural_hash() == symbolic_graph().structural_hash()


def changed(graph, which, **changes):
    """A copy of `graph` with the first `which` node changed."""
    g = graph.copy()
    node = next(n for n in g if n.op == which)
    g.replace_node(replace(node, **changes))
    return g


@pytest.mark.parametrize("op, changes", [
    ("gelu", {"op": "relu", "attrs": {}}),
    ("gelu", {"attrs": {"approximate": "none"}}),
    ("conv2d", {"attrs": {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1),
                          "groups": 1}}),
    ("to_layout", {"type": None}),
    ("mul", {"inputs": None}),
])
def test_hash_changes_when_the_computation_changes(op, changes):
    graph = symbolic_graph()
    node = next(n for n in graph if n.op == op)
    if changes.get("type", 0) is None:
        changes["type"] = TensorType(node.type.shape, node.type.dtype, "NCHW")
    if changes.get("inputs", 0) is None:
        changes["inputs"] = tuple(reversed(node.inputs))
    assert changed(graph, op, **changes).structural_hash() != graph.structural_hash()


def test_hash_depends_on_input_order():
    graph = symbolic_graph()
    swapped = graph.copy()
    swapped.inputs = list(reversed(graph.inputs))
    assert swapped.structural_hash() != graph.structural_hash()


def test_hash_depends_on_inputs_no_output_uses():
    graph = symbolic_graph()
    extra = graph.copy()
    extra.input("unused", TensorType((3,), "f32"))
    assert extra.structural_hash() != graph.structural_hash()


def test_hash_ignores_source_lines_and_origins():
    graph = symbolic_graph()
    node = next(n for n in graph if n.source)
    g = changed(graph, node.op, source="elsewhere.py:1", origin=("some_rule",))
    assert g.structural_hash() == graph.structural_hash()
