"""The verifier rejects malformed graphs with a message naming the node (and its source
line); a well-formed graph passes."""

from __future__ import annotations

import pytest
import torch
from irgraphs import symbolic_graph

from cuvil.errors import IRError
from cuvil.ir import Graph, Node, TensorType

F32 = TensorType((2, 3), "f32")


def base() -> tuple[Graph, str]:
    g = Graph()
    return g, g.input("x", F32)


def put(g: Graph, name: str, op: str, inputs=(), attrs=None, type=F32) -> str:
    """Insert a node as written, bypassing the checks `Graph.add` makes."""
    g._put(Node(name, op, tuple(inputs), attrs or {}, type, source="model.py:7"))
    return name


def test_a_well_formed_graph_passes():
    symbolic_graph().verify()


def test_unknown_op_is_named():
    g, x = base()
    g.set_outputs(put(g, "y", "frobnicate", [x]))
    with pytest.raises(IRError, match=r"node y = frobnicate \(from model.py:7\): unknown op"):
        g.verify()


def test_use_before_definition():
    g, x = base()
    put(g, "y", "relu", ["z"])
    put(g, "z", "relu", [x])
    g.set_outputs("y")
    with pytest.raises(IRError, match="node y = relu .*'z' is used before it is defined"):
        g.verify()


def test_cycle():
    g, _ = base()
    put(g, "a", "relu", ["b"])
    put(g, "b", "relu", ["a"])
    g.set_outputs("b")
    with pytest.raises(IRError, match="node a = relu .*'b' is used before it is defined"):
        g.verify()


def test_undefined_input():
    g, _ = base()
    g.set_outputs(put(g, "y", "relu", ["nowhere"]))
    with pytest.raises(IRError, match="node y = relu .*'nowhere' is not defined"):
        g.verify()


def test_wrong_type():
    g, x = base()
    g.set_outputs(put(g, "y", "relu", [x], type=TensorType((3, 2), "f32")))
    with pytest.raises(IRError, match=r"node y = relu .*f32\[3,2\] disagrees with inferred "
                                      r"f32\[2,3\]"):
        g.verify()


def test_shape_error_in_an_op():
    g, x = base()
    g.set_outputs(put(g, "y", "matmul", [x, x]))
    with pytest.raises(IRError, match="node y = matmul .*inner dims differ"):
        g.verify()


def test_missing_constant():
    g, _ = base()
    g.const(torch.zeros(2, 3), ref="w")
    del g.constants["w"]
    g.set_outputs("w")
    with pytest.raises(IRError, match="node w = const: constant 'w' is missing"):
        g.verify()


def test_constant_of_the_wrong_shape():
    g, _ = base()
    g.const(torch.zeros(2, 3), ref="w")
    g.constants["w"] = torch.zeros(3, 2)
    g.set_outputs("w")
    with pytest.raises(IRError, match="node w = const: type f32.2,3. disagrees"):
        g.verify()


def test_missing_attribute():
    g, x = base()
    g.set_outputs(put(g, "y", "reshape", [x]))
    with pytest.raises(IRError, match="node y = reshape .*missing attribute 'shape'"):
        g.verify()


def test_undefined_output():
    g, x = base()
    g.output_structure = ("x", "ghost")
    with pytest.raises(IRError, match="output 'ghost' is not defined"):
        g.verify()
