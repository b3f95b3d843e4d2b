"""Catalog ops as standard ONNX ops: one emitter per op, for the exporter (`export`).

An emitter writes the ONNX nodes computing one Cuvil node, the last of them named like the
node. Shapes are logical in the IR, so a layout or device conversion is an Identity: ONNX
values have no physical layout or placement. Shape ops (`reshape`, `view`, `flatten`,
`squeeze`, `unsqueeze`) are one Reshape to the node's own (inferred) shape, except a
`flatten` from dim 1 to the last, which is ONNX's Flatten (and is imported back as it was).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from cuvil.ir.graph import Node
from cuvil.ir.types import DType, is_static
from cuvil.onnx.export import ELEM, Writer
from cuvil.onnx.export_index import INDEX_EMITTERS
from cuvil.onnx.export_quantized import QUANTIZED_EMITTERS
from cuvil.onnx.export_recurrent import recurrent
from cuvil.ops import registry

Emit = Callable[[Writer, Node], None]
INT64_MAX = 2**63 - 1

BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow",
          "maximum": "Max", "minimum": "Min"}
COMPARE = {"eq": "Equal", "lt": "Less", "le": "LessOrEqual", "gt": "Greater",
           "ge": "GreaterOrEqual", "logical_and": "And", "logical_or": "Or"}
UNARY = {"sqrt": "Sqrt", "exp": "Exp", "log": "Log", "tanh": "Tanh", "erf": "Erf",
         "sin": "Sin", "cos": "Cos", "sigmoid": "Sigmoid", "reciprocal": "Reciprocal",
         "neg": "Neg", "relu": "Relu", "abs": "Abs", "hardswish": "HardSwish",
         "logical_not": "Not", "dropout": "Identity", "to_layout": "Identity",
         "to_device": "Identity"}
REDUCE = {"sum": "ReduceSum", "mean": "ReduceMean", "amax": "ReduceMax"}


def emit(w: Writer, node: Node) -> None:
    op = node.op
    if op in BINARY:
        w.add(BINARY[op], [w.arg(i, node.type.dtype) for i in node.inputs], out=node.name)
    elif op in COMPARE or op == "ne":
        _compare(w, node)
    elif op in UNARY:
        w.add(UNARY[op], [w.arg(node.inputs[0])], out=node.name)
    elif op in REDUCE:
        _reduce(w, node)
    elif op == "flatten" and _to_matrix(w, node):
        w.add("Flatten", [w.arg(node.inputs[0])], out=node.name, axis=1)
    elif registry.is_reshape(op):
        _reshape(w, node.inputs[0], node)
    elif op in EMITTERS:
        EMITTERS[op](w, node)
    else:
        raise w.unsupported(f"op {op!r} has no ONNX form")


def _compare(w: Writer, node: Node) -> None:
    """Operands in one dtype: the dtype of the first tensor operand (a number is weak)."""
    types = [w.graph.type_of(i) for i in node.inputs]
    strong = [t.dtype for t in types if not t.weak] or [types[0].dtype]
    dtype = DType.bool if node.op.startswith("logical") else (
        DType.f32 if any(d.is_float for d in strong) and not strong[0].is_float else strong[0])
    args = [w.arg(i, dtype) for i in node.inputs]
    if node.op == "ne":
        w.add("Not", [w.add("Equal", args)], out=node.name)
    else:
        w.add(COMPARE[node.op], args, out=node.name)


def _reduce(w: Writer, node: Node) -> None:
    dims = node.attrs["dim"]
    args = [w.arg(node.inputs[0])] + ([w.ints(list(dims))] if dims else [])
    w.add(REDUCE[node.op], args, out=node.name, keepdims=int(node.attrs["keepdim"]))


def _to_matrix(w: Writer, node: Node) -> bool:
    """Whether `flatten` keeps dim 0 and flattens the rest: ONNX's Flatten(axis=1)."""
    rank = w.graph.type_of(node.inputs[0]).rank
    end = node.attrs.get("end_dim", -1)
    return rank > 1 and node.attrs.get("start_dim", 0) == 1 and end in (-1, rank - 1)


def _reshape(w: Writer, value: str, node: Node) -> None:
    shape = node.type.shape
    free = [i for i, d in enumerate(shape) if not is_static(d)]
    if len(free) == 1:  # one unknown dim: ONNX infers it (-1), no run-time arithmetic
        target = w.ints([-1 if i == free[0] else d for i, d in enumerate(shape)])
    else:
        target = w.shape(shape)
    w.add("Reshape", [w.arg(value), target], out=node.name)


def _clip(w: Writer, node: Node, lo, hi) -> None:
    dtype = node.type.dtype
    args = [w.arg(node.inputs[0]), "" if lo is None else w.constant(lo, dtype),
            "" if hi is None else w.constant(hi, dtype)]
    while args[-1] == "":
        args.pop()
    w.add("Clip", args, out=node.name)


def _permute(w: Writer, node: Node) -> None:
    w.add("Transpose", [w.arg(node.inputs[0])], out=node.name, perm=list(node.attrs["dims"]))


def _transpose(w: Writer, node: Node) -> None:
    rank = len(node.type.shape)
    perm = list(range(rank))
    a, b = node.attrs["dim0"] % rank, node.attrs["dim1"] % rank
    perm[a], perm[b] = perm[b], perm[a]
    w.add("Transpose", [w.arg(node.inputs[0])], out=node.name, perm=perm)


def _conv2d(w: Writer, node: Node) -> None:
    a = node.attrs
    pads = list(a["padding"]) * 2
    w.add("Conv", [w.arg(i) for i in node.inputs], out=node.name, strides=list(a["stride"]),
          pads=pads, dilations=list(a["dilation"]), group=a["groups"])


def _max_pool(w: Writer, node: Node) -> None:
    a = node.attrs
    w.add("MaxPool", [w.arg(node.inputs[0])], out=node.name,
          kernel_shape=list(a["kernel_size"]), strides=list(a["stride"] or a["kernel_size"]),
          pads=list(a["padding"]) * 2, dilations=list(a["dilation"]),
          ceil_mode=int(a["ceil_mode"]))


def _avg_pool(w: Writer, node: Node) -> None:
    a = node.attrs
    w.add("AveragePool", [w.arg(node.inputs[0])], out=node.name,
          kernel_shape=list(a["kernel_size"]), strides=list(a["stride"] or a["kernel_size"]),
          pads=list(a["padding"]) * 2, ceil_mode=int(a["ceil_mode"]),
          count_include_pad=int(a["count_include_pad"]))


def _adaptive_avg_pool(w: Writer, node: Node) -> None:
    x = node.inputs[0]
    size = tuple(w.graph.type_of(x).shape[-2:])
    out = tuple(node.attrs["output_size"])
    if out == (1, 1):
        w.add("GlobalAveragePool", [w.arg(x)], out=node.name)
        return
    if not all(is_static(d) and d % o == 0 for d, o in zip(size, out, strict=True)):
        raise w.unsupported(f"adaptive pooling of {size} to {out} is not a plain pooling")
    kernel = [d // o for d, o in zip(size, out, strict=True)]
    w.add("AveragePool", [w.arg(x)], out=node.name, kernel_shape=kernel, strides=kernel)


def _layer_norm(w: Writer, node: Node) -> None:
    w.add("LayerNormalization", [w.arg(i) for i in node.inputs], out=node.name,
          axis=-len(node.attrs["normalized_shape"]), epsilon=node.attrs["eps"])


def _batch_norm(w: Writer, node: Node) -> None:
    w.add("BatchNormalization", [w.arg(i) for i in node.inputs], out=node.name,
          epsilon=node.attrs["eps"])


def _softmax(w: Writer, node: Node) -> None:
    op = "Softmax" if node.op == "softmax" else "LogSoftmax"
    w.add(op, [w.arg(node.inputs[0])], out=node.name, axis=node.attrs["dim"])


def _where(w: Writer, node: Node) -> None:
    cond, x, y = node.inputs
    dtype = node.type.dtype
    w.add("Where", [w.arg(cond, DType.bool), w.arg(x, dtype), w.arg(y, dtype)], out=node.name)


def _masked_fill(w: Writer, node: Node) -> None:
    x, mask = node.inputs
    value = w.constant(node.attrs["value"], node.type.dtype)
    w.add("Where", [w.arg(mask, DType.bool), value, w.arg(x)], out=node.name)


def _slice(w: Writer, node: Node) -> None:
    a = node.attrs
    end = INT64_MAX if a["end"] is None else a["end"]
    ends = w.ints([end]) if is_static(end) else w.dim(end)
    w.add("Slice", [w.arg(node.inputs[0]), w.ints([a["start"]]), ends, w.ints([a["dim"]]),
                    w.ints([a["step"]])], out=node.name)


def _select(w: Writer, node: Node) -> None:
    index = w.constant(node.attrs["index"], DType.i64)
    w.add("Gather", [w.arg(node.inputs[0]), index], out=node.name, axis=node.attrs["dim"])


def _expand(w: Writer, node: Node) -> None:
    # Expand broadcasts: a target dim equal to the input's own may be written 1
    x = node.inputs[0]
    have = w.graph.type_of(x).shape
    want = node.type.shape
    lead = len(want) - len(have)
    dims = tuple(1 if i >= lead and have[i - lead] == d else d for i, d in enumerate(want))
    w.add("Expand", [w.arg(x), w.shape(dims)], out=node.name)


def _sdpa(w: Writer, node: Node) -> None:
    """softmax(q @ k^T * scale + mask) @ v, as torch computes it."""
    q, k, v = node.inputs[:3]
    dtype = node.type.dtype
    qt = w.graph.type_of(q).shape
    scale = node.attrs["scale"]
    if scale is None:
        scale = 1 / math.sqrt(qt[-1])
    rank = len(w.graph.type_of(k).shape)
    kt = w.add("Transpose", [w.arg(k)], perm=[*range(rank - 2), rank - 1, rank - 2])
    scores = w.add("Mul", [w.add("MatMul", [w.arg(q), kt]), w.constant(scale, dtype)])
    if len(node.inputs) == 4:
        scores = _masked(w, scores, node.inputs[3], dtype)
    if node.attrs["is_causal"]:
        ones = w.add("ConstantOfShape", [w.shape((qt[-2], w.graph.type_of(k).shape[-2]))],
                     value=w.helper.make_tensor("one", ELEM[DType.f32], [1], [1.0]))
        tril = w.add("Cast", [w.add("Trilu", [ones], upper=0)], to=ELEM[DType.bool])
        scores = w.add("Where", [tril, scores, w.constant(-math.inf, dtype)])
    probs = w.add("Softmax", [scores], axis=-1)
    w.add("MatMul", [probs, w.arg(v)], out=node.name)


def _masked(w: Writer, scores: str, mask: str, dtype: DType) -> str:
    if w.dtype(mask) == DType.bool:
        return w.add("Where", [w.arg(mask), scores, w.constant(-math.inf, dtype)])
    return w.add("Add", [scores, w.arg(mask, dtype)])


def _simple(op_type: str, **fixed) -> Emit:
    def run(w: Writer, node: Node) -> None:
        w.add(op_type, [w.arg(i) for i in node.inputs], out=node.name, **fixed)
    return run


EMITTERS: dict[str, Emit] = {
    "rsqrt": lambda w, n: w.add("Reciprocal", [w.add("Sqrt", [w.arg(n.inputs[0])])],
                                out=n.name),
    "silu": lambda w, n: w.add("Mul", [w.arg(n.inputs[0]),
                                       w.add("Sigmoid", [w.arg(n.inputs[0])])], out=n.name),
    "relu6": lambda w, n: _clip(w, n, 0.0, 6.0),
    "hardtanh": lambda w, n: _clip(w, n, n.attrs["min_val"], n.attrs["max_val"]),
    "clamp": lambda w, n: _clip(w, n, n.attrs["min"], n.attrs["max"]),
    "hardsigmoid": _simple("HardSigmoid", alpha=1 / 6, beta=0.5),
    "gelu": lambda w, n: w.add("Gelu", [w.arg(n.inputs[0])], out=n.name,
                               approximate=n.attrs["approximate"]),
    "cast": lambda w, n: w.add("Cast", [w.arg(n.inputs[0])], out=n.name,
                               to=ELEM[DType(n.attrs["dtype"])]),
    "matmul": _simple("MatMul"),
    "bmm": _simple("MatMul"),
    "embedding": lambda w, n: w.add("Gather", [w.arg(n.inputs[0]), w.arg(n.inputs[1])],
                                    out=n.name, axis=0),
    "gather": lambda w, n: w.add("GatherElements", [w.arg(i) for i in n.inputs],
                                 out=n.name, axis=n.attrs["dim"]),
    "cat": lambda w, n: w.add("Concat", [w.arg(i, n.type.dtype) for i in n.inputs],
                              out=n.name, axis=n.attrs["dim"]),
    "permute": _permute,
    "transpose": _transpose,
    "conv2d": _conv2d,
    "max_pool2d": _max_pool,
    "avg_pool2d": _avg_pool,
    "adaptive_avg_pool2d": _adaptive_avg_pool,
    "layer_norm": _layer_norm,
    "batch_norm": _batch_norm,
    "softmax": _softmax,
    "log_softmax": _softmax,
    "where": _where,
    "masked_fill": _masked_fill,
    "slice": _slice,
    "select": _select,
    "expand": _expand,
    "scaled_dot_product_attention": _sdpa,
    "lstm_layer": recurrent,
    "gru_layer": recurrent,
    **INDEX_EMITTERS,
    **QUANTIZED_EMITTERS,
}
