"""`place_on`: a graph computed on one device, its inputs, constants and outputs moved, the
same values as the graph it was made from (the reference executor)."""

from __future__ import annotations

import torch

import cuvil
from cuvil.ir import Graph, TensorType, devices
from cuvil.ir.place import place_on

DEVICE = next(d for d in sorted(devices.known_devices()) if not devices.on_host(d))


def small_graph() -> Graph:
    g = Graph("small")
    x = g.input("x", TensorType((2, 3), "f32"))
    w = g.const(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), ref="w")
    y = g.add("matmul", [x, w], source="model.py:3")
    y = g.add("relu", [g.add("mul", [y, g.scalar(0.5)])], source="model.py:4")
    g.set_outputs({"y": y, "parts": (x, y)})
    return g.verify()


def test_every_computing_node_is_on_the_device():
    placed = place_on(small_graph(), DEVICE)
    kinds = {n.op: n.type.device for n in placed if n.op not in ("input", "const", "scalar",
                                                                 "to_device")}
    assert kinds == {"matmul": DEVICE, "mul": DEVICE, "relu": DEVICE}
    assert [n.source for n in placed if n.op == "matmul"] == ["model.py:3"]


def test_inputs_move_in_constants_live_there_and_outputs_move_out():
    placed = place_on(small_graph(), DEVICE)
    moves = [n for n in placed if n.op == "to_device"]
    into = sorted(placed[n.inputs[0]].op for n in moves if n.type.device == DEVICE)
    assert into == ["input"]
    assert all(n.type.device == DEVICE for n in placed if n.op == "const")
    assert all(placed[o].op == "to_device" and placed[o].type.device == devices.HOST
               for o in placed.outputs)
    assert placed.inputs == ["x"]


def test_the_placed_graph_computes_the_same_values():
    g, x = small_graph(), torch.randn(2, 3)
    torch.testing.assert_close(cuvil.run(place_on(g, DEVICE), x), cuvil.run(g, x))


def test_a_move_the_model_makes_is_dropped():
    g = Graph("moves")
    x = g.input("x", TensorType((4,), "f32"))
    there = g.add("to_device", [x], {"device": DEVICE})
    g.set_outputs(g.add("neg", [g.add("to_device", [there], {"device": devices.HOST})]))
    placed = place_on(g.verify(), DEVICE)
    assert [n.op for n in placed] == ["input", "to_device", "neg", "to_device"]
    torch.testing.assert_close(cuvil.run(placed, torch.arange(4.0)), -torch.arange(4.0))


def test_the_host_is_no_placement():
    g = small_graph()
    assert place_on(g, devices.HOST) is g


def test_an_opaque_op_records_its_type_on_the_device_and_sources_move_there():
    g = Graph("opaque")
    x = g.input("x", TensorType((2, 3), "f32"))
    steps = g.add("arange", [], {"shape": (3,), "dtype": "f32"})
    moved = g.add("add", [x, steps])
    out = str(g.type_of(moved))
    g.set_outputs(g.add("torch_op", [moved], {"target": "aten.sort.default",
                                              "args": ("$0", -1, False), "index": 0,
                                              "out": out}))
    placed = place_on(g.verify(), DEVICE)
    sort = next(n for n in placed if n.op == "torch_op")
    assert sort.type.device == DEVICE and TensorType.parse(sort.attrs["out"]) == sort.type
    assert placed[placed[moved].inputs[1]].op == "to_device"  # the arange, moved
    x_in = torch.randn(2, 3)
    torch.testing.assert_close(cuvil.run(placed, x_in), cuvil.run(g, x_in))
