"""The IR text form round-trips: print -> parse -> the same text and structural hash."""

from __future__ import annotations

import math

import pytest
import torch
from irgraphs import symbolic_graph

from cuvil import zoo
from cuvil.errors import IRError
from cuvil.ir import Graph, TensorType, parse_dim, sym
from cuvil.ir.text import format_value
from cuvil.ops.execute import run


def round_trip(graph: Graph) -> Graph:
    text = graph.to_text()
    again = Graph.from_text(text, graph.constants)
    assert again.to_text() == text
    assert again.structural_hash() == graph.structural_hash()
    return again.verify()


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_every_zoo_model_round_trips(name, zoo_graph):
    model, graph = zoo_graph(name)
    again = round_trip(graph)
    _, inputs = zoo.get(name, batch=3)
    torch.testing.assert_close(run(again, *inputs), run(graph, *inputs), rtol=0, atol=0)


def test_a_graph_with_every_kind_of_attribute_round_trips():
    graph = symbolic_graph()
    again = round_trip(graph)
    nodes = list(again)
    assert [n.source for n in nodes] == [n.source for n in graph]
    assert [n.origin for n in nodes] == [n.origin for n in graph]
    assert again.output_structure == graph.output_structure
    assert again.constants["conv.weight"] is graph.constants["conv.weight"]
    fill = next(n for n in again if n.op == "masked_fill")
    assert fill.attrs["value"] == -math.inf and isinstance(fill.attrs["value"], float)


@pytest.mark.parametrize("value", [0.1, -2.5, math.inf, -math.inf, 1e-05, 7, -3, True, None,
                                   "tanh", 'a "quoted" #string', (1, (2, "x")), (),
                                   (4,), sym("batch") * 128])
def test_attribute_values_read_back_as_themselves(value):
    g = Graph()
    x = g.input("x", TensorType((2,), "f32"))
    g.set_outputs(g.add("torch_op", [x], {"target": "aten.relu.default", "args": ("$0",),
                                          "kwargs": (("v", value),), "out": "f32[2]"}))
    again = Graph.from_text(g.to_text())
    assert again[g.outputs[0]].attrs["kwargs"] == (("v", value),)
    assert again.to_text() == g.to_text()


def test_nan_reads_back_as_nan():
    assert format_value(math.nan) == "nan"
    g = Graph()
    x = g.input("x", TensorType((2,), "f32"))
    g.set_outputs(g.add("masked_fill", [x, g.input("m", TensorType((2,), "bool"))],
                        {"value": math.nan}))
    value = Graph.from_text(g.to_text())[g.outputs[0]].attrs["value"]
    assert isinstance(value, float) and math.isnan(value)


@pytest.mark.parametrize("text", ["batch", "2*batch", "batch*H + 1", "floor(batch/2)",
                                  "ceiling(H/3)", "Min(64,batch)", "Max(batch,H)",
                                  "Mod(batch,4)"])
def test_dims_read_back_as_themselves(text):
    from cuvil.ir.types import format_dim

    d = parse_dim(text)
    assert parse_dim(format_dim(d)) == d


def test_types_carry_layout_and_device_tags():
    for text in ["f32[batch,3,H,W]:NHWC", "i8[4]@cuda", "bool[]", "bf16[2,2]:NCHW@cuda"]:
        t = TensorType.parse(text)
        assert TensorType.parse(str(t)) == t
    assert TensorType.parse("f32[1,2,3,4]:NHWC").layout == "NHWC"


@pytest.mark.parametrize("text, message", [
    ("graph g(x: f32[2]) {\n  y = relu(x : f32[2]\n  return y\n}", "line 2"),
    ("graph g(x: f32[2]) {\n  y = relu(z) : f32[2]\n  return y\n}", "'z' is not defined"),
    ("graph g(x: f64x[2]) {\n  return x\n}", "unknown dtype"),
    ("graph g(x: f32[2]) {\n  return x\n", "must start with"),
    ("graph g(x: f32[2]) {\n  y = relu(x) : f32[2]\n  y = relu(x) : f32[2]\n  return y\n}",
     "defined twice"),
])
def test_malformed_text_is_a_clear_error(text, message):
    with pytest.raises(IRError, match=message):
        Graph.from_text(text)
