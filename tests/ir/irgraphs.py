"""Hand-built graphs for the IR tests: symbolic dims, every attribute kind, tags, origins."""

from __future__ import annotations

import torch

from cuvil.ir import Graph, Node, TensorType, sym


def symbolic_graph(name: str = "block") -> Graph:
    """A small graph with symbolic dims, strings, tuples, None, -inf, a layout and a device
    tag, source lines, rule origins, a torch_op and a nested output structure."""
    b, h = sym("batch"), sym("H")
    g = Graph(name)
    x = g.input("x", TensorType((b, 3, h, 8), "f32"))
    mask = g.input("mask", TensorType((b, 3 * h * 8), "bool"))
    w = g.const(torch.randn(4, 3, 3, 3), ref="conv.weight")
    y = g.add("conv2d", [x, w], {"padding": (1, 1)}, source="model.py:12")
    y = g.add("to_layout", [y], {"layout": "NHWC"}, origin=("conv_nhwc", "layout"))
    y = g.add("gelu", [y], {"approximate": "tanh"}, source="model.py:13")
    flat = g.add("reshape", [y], {"shape": (b, 4 * h * 8)})
    half = g.add("slice", [flat], {"dim": 1, "start": 0, "end": 3 * h * 8, "step": 1})
    filled = g.add("masked_fill", [half, mask], {"value": float("-inf")})
    pooled = g.add("reshape", [filled], {"shape": (b, 3, 4 * h, 2)})
    halved = g.add("max_pool2d", [y], {"kernel_size": (2, 3), "ceil_mode": True})
    sorted_ = g.add("torch_op", [pooled], {"target": "aten.sort.default",
                                          "args": ("$0", -1, False), "index": 0,
                                          "out": str(g.type_of(pooled))})
    s = g.add("mul", [sorted_, g.scalar(0.5)])
    dev = g.add("to_device", [s], {"device": "cuda"})
    g.set_outputs({"out": dev, "parts": [half, (flat, halved)]})
    return g.verify()


def renamed(graph: Graph, prefix: str) -> Graph:
    """The same computation with every value renamed (`prefix` + old name)."""
    g = Graph(graph.name + "_renamed")
    g.constants = dict(graph.constants)
    for node in graph:
        new = Node(prefix + node.name, node.op, tuple(prefix + i for i in node.inputs),
                   dict(node.attrs), node.type, node.source, node.origin)
        g._put(new)
        if node.op == "input":
            g.inputs.append(new.name)
    g.set_outputs(_rename(graph.output_structure, prefix))
    return g


def _rename(structure, prefix):
    if isinstance(structure, str):
        return prefix + structure
    if isinstance(structure, dict):
        return {k: _rename(v, prefix) for k, v in structure.items()}
    return type(structure)(_rename(v, prefix) for v in structure)
