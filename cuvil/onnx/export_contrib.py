"""Fused ops that ONNX Runtime computes as one op: its contrib ops (domain `com.microsoft`)
and a standard op's own fused form (a `Conv` with its bias input), for the exporter.

Each entry says when it matches a fused node exactly (f32 throughout, the bias a vector
over the output channels or features, the residual of the output's own shape) and writes
it; a node that does not match is expanded from its `.cvr` definition as any other.

    conv2d_bias          -> Conv(x, w, b)
    conv2d_bias_relu     -> FusedConv(x, w, b, activation=Relu)
    conv2d_bias_relu6    -> FusedConv(x, w, b, activation=Clip, activation_params=[0, 6])
    conv2d_bias_add_relu -> FusedConv(x, w, b, r, activation=Relu)   (relu(conv + b + r))
    linear_gelu          -> BiasGelu(MatMul(x, w), b)                 (erf gelu)
"""

from __future__ import annotations

from cuvil.ir.graph import Graph, Node
from cuvil.ir.types import DType
from cuvil.onnx.export import Writer

MS = "com.microsoft"
PREFIX = "contrib:"
CONV = {"conv2d_bias": None, "conv2d_bias_relu": ("Relu", []),
        "conv2d_bias_relu6": ("Clip", [0.0, 6.0]), "conv2d_bias_add_relu": ("Relu", [])}


def matches(graph: Graph, node: Node) -> bool:
    """Whether `node` (a fused op) has one exact ONNX Runtime form."""
    types = [graph.type_of(i) for i in node.inputs] + [node.type]
    if any(t.dtype != DType.f32 for t in types) or node.op not in (*CONV, "linear_gelu"):
        return False
    bias = graph.type_of(node.inputs[2]).shape
    if node.op == "linear_gelu":
        return node.attrs["approximate"] == "none" and bias == node.type.shape[-1:]
    if len(bias) > 4 or (1,) * (4 - len(bias)) + tuple(bias) != (1, node.type.shape[1], 1, 1):
        return False
    if node.op == "conv2d_bias_add_relu":
        return graph.type_of(node.inputs[3]).shape == node.type.shape
    return True


def mark(graph: Graph) -> Graph:
    """A copy of `graph` whose matching fused nodes are renamed `contrib:<op>`, so that
    composite inlining leaves them whole."""
    out = graph.copy()
    for node in graph:
        if node.op in graph.defs and matches(graph, node):
            out.replace_node(Node(node.name, PREFIX + node.op, node.inputs, node.attrs,
                                  node.type, node.source, node.origin))
    return out


def emit(w: Writer, node: Node) -> None:
    op = node.op.removeprefix(PREFIX)
    if op == "linear_gelu":
        x, weight, b = node.inputs
        mm = w.add("MatMul", [w.arg(x), w.arg(weight)])
        w.add("BiasGelu", [mm, w.arg(b)], out=node.name, domain=MS)
        return
    a = node.attrs
    x, weight, b = node.inputs[:3]
    bias = _vector(w, b)
    conv = {"strides": list(a["stride"]), "pads": list(a["padding"]) * 2,
            "dilations": list(a["dilation"]), "group": a["groups"]}
    if CONV[op] is None:
        w.add("Conv", [w.arg(x), w.arg(weight), bias], out=node.name, **conv)
        return
    activation, params = CONV[op]
    extra = {"activation_params": params} if params else {}
    w.add("FusedConv", [w.arg(x), w.arg(weight), bias, *map(w.arg, node.inputs[3:])],
          out=node.name, domain=MS, activation=activation, **extra, **conv)


def _vector(w: Writer, b: str) -> str:
    """Bias `b` as the 1-D tensor Conv takes: a constant reshaped in the file, else at run
    time."""
    node = w.graph[b]
    if node.op == "const":
        tensor = w.graph.constants[node.attrs["ref"]]
        return w.initializer(tensor.detach().cpu().reshape(-1).numpy())
    return w.add("Reshape", [w.arg(b), w.ints([-1])])
