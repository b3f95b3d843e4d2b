"""The ONNX -> Cuvil op table: each ONNX op type's converter onto catalog ops.

A converter gets the importer (`ix`: the node's attributes in `ix.attrs`, its inputs as
graph values through `ix.tensor`, as known arrays through `ix.constant`) and the node's
input names, and returns a `Value` (or a tuple, one per output). Attributes it cannot map
make it raise `Unsupported` (`need` says why), which the importer reports as a one-line
error naming the node. Ops map onto the catalog ops the aten frontend uses for the same
computation, so the same rules fire. Shape ops are in `ops_shape`, LSTM and GRU in
`ops_recurrent`, CumSum and GatherND in `ops_index`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from cuvil.frontend.converter import Value
from cuvil.onnx.importer import dtype_of, need
from cuvil.onnx.ops_index import INDEX_OPS
from cuvil.onnx.ops_recurrent import RECURRENT_OPS
from cuvil.onnx.ops_shape import SHAPE_OPS, axes, known_as

if TYPE_CHECKING:
    from cuvil.onnx.importer import OnnxImporter

Names = list[str]


# -- elementwise -----------------------------------------------------------------------------
def unary(op: str) -> Callable:
    return lambda ix, xs: ix.add(op, [ix.tensor(xs[0])])


def binary(op: str) -> Callable:
    return lambda ix, xs: ix.add(op, [ix.tensor(xs[0]), ix.tensor(xs[1])])


def div(ix: OnnxImporter, xs: Names) -> Value:
    x, y = ix.tensor(xs[0]), ix.tensor(xs[1])
    need(ix.type(x).dtype.is_float, "integer Div (truncating) is not mapped")
    return ix.add("div", [x, y])


def variadic(op: str) -> Callable:
    """Max/Min/Sum of any number of inputs, pairwise."""

    def convert(ix: OnnxImporter, xs: Names) -> Value:
        y = ix.tensor(xs[0])
        for name in xs[1:]:
            y = ix.add(op, [y, ix.tensor(name)])
        return y

    return convert


def identity(ix: OnnxImporter, xs: Names) -> Value:
    return ix.tensor(xs[0])


def dropout(ix: OnnxImporter, xs: Names) -> Value:
    need(len(ix.node.output) < 2 or not ix.node.output[1], "Dropout's mask output")
    training = ix.constant(xs, 2)
    need(training is None or not bool(training), "Dropout in training mode")
    return ix.tensor(xs[0])


def gelu(ix: OnnxImporter, xs: Names) -> Value:
    return ix.add("gelu", [ix.tensor(xs[0])], {"approximate": ix.attrs.get("approximate",
                                                                            "none")})


def hardsigmoid(ix: OnnxImporter, xs: Names) -> Value:
    alpha, beta = ix.attrs.get("alpha", 0.2), ix.attrs.get("beta", 0.5)
    x = ix.tensor(xs[0])
    if abs(alpha - 1 / 6) < 1e-6 and abs(beta - 0.5) < 1e-6:
        return ix.add("hardsigmoid", [x])
    y = ix.add("add", [ix.add("mul", [x, ix.scalar(alpha)]), ix.scalar(beta)])
    return ix.add("clamp", [y], {"min": 0.0, "max": 1.0})


def leaky_relu(ix: OnnxImporter, xs: Names) -> Value:
    x = ix.tensor(xs[0])
    negative = ix.add("mul", [x, ix.scalar(ix.attrs.get("alpha", 0.01))])
    return ix.add("where", [ix.add("gt", [x, ix.scalar(0.0)]), x, negative])


def clip(ix: OnnxImporter, xs: Names) -> Value:
    """Known bounds are `clamp`'s attributes (`relu6` for 0..6), tensor ones `maximum` /
    `minimum`; opset < 11's bounds are attributes."""
    x = ix.tensor(xs[0])
    bounds = []
    for i, key in ((1, "min"), (2, "max")):
        known = ix.constant(xs, i)
        bounds.append(float(known) if known is not None else ix.attrs.get(key)
                      if i >= len(xs) or not xs[i] else ix.tensor(xs[i]))
    lo, hi = bounds
    if not isinstance(lo, Value) and not isinstance(hi, Value):
        if (lo, hi) == (0.0, 6.0):
            return ix.add("relu6", [x])
        return ix.add("clamp", [x], {"min": lo, "max": hi})
    for bound, op in ((lo, "maximum"), (hi, "minimum")):
        if bound is not None:
            x = ix.add(op, [x, bound if isinstance(bound, Value) else ix.scalar(bound)])
    return x


def cast(ix: OnnxImporter, xs: Names) -> Value:
    x, dtype = ix.tensor(xs[0]), dtype_of(ix.attrs["to"], ix.where())
    return x if ix.type(x).dtype == dtype else ix.add("cast", [x], {"dtype": str(dtype)})


# -- linear algebra --------------------------------------------------------------------------
def transposed(ix: OnnxImporter, name: str) -> Value:
    """The transpose of a 2-d operand: a folded constant for a weight."""
    known = ix.known.get(name)
    if known is not None:
        return ix.tensor(known_as(ix, name + ".T", known.T.copy()))
    return ix.add("transpose", [ix.tensor(name)], {"dim0": 0, "dim1": 1})


def gemm(ix: OnnxImporter, xs: Names) -> Value:
    a = transposed(ix, xs[0]) if ix.attrs.get("transA") else ix.tensor(xs[0])
    b = transposed(ix, xs[1]) if ix.attrs.get("transB") else ix.tensor(xs[1])
    y = ix.add("matmul", [a, b])
    alpha, beta = ix.attrs.get("alpha", 1.0), ix.attrs.get("beta", 1.0)
    if alpha != 1.0:
        y = ix.add("mul", [y, ix.scalar(alpha)])
    c = ix.value(xs, 2)
    if c is None or beta == 0.0:
        return y
    if beta != 1.0:
        c = ix.add("mul", [c, ix.scalar(beta)])
    return ix.add("add", [y, c])


# -- neural-network ops ----------------------------------------------------------------------
def pads2d(ix: OnnxImporter, rank: int = 2) -> tuple[int, ...]:
    need(ix.attrs.get("auto_pad", "NOTSET") in ("NOTSET", "VALID"),
         f"auto_pad={ix.attrs.get('auto_pad')} is not mapped")
    pads = list(ix.attrs.get("pads", [0] * 2 * rank))
    need(pads[:rank] == pads[rank:], f"asymmetric pads {pads} are not mapped")
    return tuple(pads[:rank])


def channel_bias(ix: OnnxImporter, name: str) -> Value:
    known = ix.known.get(name)
    if known is not None:
        return ix.tensor(known_as(ix, name + ".bcast", known.reshape(-1, 1, 1)))
    b = ix.tensor(name)
    return ix.add("reshape", [b], {"shape": (ix.type(b).shape[0], 1, 1)})


def conv(ix: OnnxImporter, xs: Names) -> Value:
    """A 2-d convolution is `conv2d`; a 1-d one is `conv2d` over a height of 1."""
    x, w = ix.tensor(xs[0]), ix.tensor(xs[1])
    rank = ix.type(w).rank - 2
    need(rank in (1, 2), f"a {rank}-d convolution is not mapped")
    attrs = {"stride": tuple(ix.attrs.get("strides", (1,) * rank)), "padding": pads2d(ix, rank),
             "dilation": tuple(ix.attrs.get("dilations", (1,) * rank)),
             "groups": ix.attrs.get("group", 1)}
    if rank == 1:
        x = ix.add("unsqueeze", [x], {"dim": 2})
        w = ix.tensor(known_as(ix, xs[1] + ".2d", ix.known[xs[1]][:, :, None])) \
            if xs[1] in ix.known else ix.add("unsqueeze", [w], {"dim": 2})
        attrs = {"stride": (1, *attrs["stride"]), "padding": (0, *attrs["padding"]),
                 "dilation": (1, *attrs["dilation"]), "groups": attrs["groups"]}
    y = ix.add("conv2d", [x, w], attrs)
    if ix.value(xs, 2) is not None:
        y = ix.add("add", [y, channel_bias(ix, xs[2])])
    return ix.add("squeeze", [y], {"dim": (2,)}) if rank == 1 else y


def batch_norm(ix: OnnxImporter, xs: Names) -> Value:
    need(not ix.attrs.get("training_mode"), "BatchNormalization in training mode")
    need(all(not o for o in ix.node.output[1:]), "BatchNormalization's running outputs")
    return ix.add("batch_norm", [ix.tensor(n) for n in xs[:5]],
                  {"eps": float(ix.attrs.get("epsilon", 1e-5))})


def layer_norm(ix: OnnxImporter, xs: Names) -> Value:
    need(all(not o for o in ix.node.output[1:]), "LayerNormalization's mean/inv-std outputs")
    x = ix.tensor(xs[0])
    shape = ix.type(x).shape[ix.attrs.get("axis", -1) % ix.type(x).rank:]
    weight = ix.tensor(xs[1])
    bias = ix.value(xs, 2)
    if bias is None:
        wt = ix.type(weight)
        bias = ix.tensor(known_as(ix, f"zeros_{ix.node.output[0]}",
                                  np.zeros(wt.shape, dtype=wt.dtype.numpy)))
    return ix.add("layer_norm", [x, weight, bias],
                  {"normalized_shape": shape, "eps": float(ix.attrs.get("epsilon", 1e-5))})


def softmax(op: str) -> Callable:
    return lambda ix, xs: ix.add(op, [ix.tensor(xs[0])], {"dim": ix.attrs.get("axis", -1)})


def pool_attrs(ix: OnnxImporter) -> dict[str, Any]:
    kernel = tuple(ix.attrs["kernel_shape"])
    need(len(kernel) == 2, f"a {len(kernel)}-d pool is not mapped")
    return {"kernel_size": kernel, "stride": tuple(ix.attrs.get("strides", (1, 1))),
            "padding": pads2d(ix), "ceil_mode": bool(ix.attrs.get("ceil_mode", 0))}


def max_pool(ix: OnnxImporter, xs: Names) -> Value:
    need(len(ix.node.output) < 2 or not ix.node.output[1], "MaxPool's indices output")
    attrs = {**pool_attrs(ix), "dilation": tuple(ix.attrs.get("dilations", (1, 1)))}
    return ix.add("max_pool2d", [ix.tensor(xs[0])], attrs)


def avg_pool(ix: OnnxImporter, xs: Names) -> Value:
    attrs = {**pool_attrs(ix), "count_include_pad": bool(ix.attrs.get("count_include_pad", 0))}
    return ix.add("avg_pool2d", [ix.tensor(xs[0])], attrs)


def global_pool(op: str) -> Callable:
    def convert(ix: OnnxImporter, xs: Names) -> Value:
        x = ix.tensor(xs[0])
        need(ix.type(x).rank == 4, "a global pool of other than 2-d images is not mapped")
        if op == "adaptive_avg_pool2d":
            return ix.add(op, [x], {"output_size": (1, 1)})
        return ix.add(op, [x], {"dim": (2, 3), "keepdim": True})

    return convert


def reduction(op: str) -> Callable:
    """ReduceMean/Sum/Max: axes as attribute (before opset 18; ReduceSum 13) or input."""

    def convert(ix: OnnxImporter, xs: Names) -> Value:
        dims = axes(ix, xs, 1)
        x = ix.tensor(xs[0])
        if not dims and ix.attrs.get("noop_with_empty_axes"):
            return x
        return ix.add(op, [x], {"dim": tuple(dims or ()),
                                "keepdim": bool(ix.attrs.get("keepdims", 1))})

    return convert


def where(ix: OnnxImporter, xs: Names) -> Value:
    return ix.add("where", [ix.tensor(n) for n in xs])


def pow_(ix: OnnxImporter, xs: Names) -> Value:
    x, y = ix.tensor(xs[0]), ix.tensor(xs[1])
    if ix.type(y).dtype != ix.type(x).dtype and ix.type(y).rank == 0:
        known = ix.constant(xs, 1)
        if known is not None:
            y = ix.scalar(float(known))
    return ix.add("pow", [x, y])


ONNX: dict[str, Callable[[OnnxImporter, Names], Any]] = {
    # elementwise arithmetic and comparisons
    "Add": binary("add"), "Sub": binary("sub"), "Mul": binary("mul"), "Div": div,
    "Pow": pow_, "Equal": binary("eq"), "Less": binary("lt"), "LessOrEqual": binary("le"),
    "Greater": binary("gt"), "GreaterOrEqual": binary("ge"), "And": binary("logical_and"),
    "Or": binary("logical_or"), "Not": unary("logical_not"),
    "Max": variadic("maximum"), "Min": variadic("minimum"), "Sum": variadic("add"),
    "IsNaN": lambda ix, xs: ix.add("ne", [ix.tensor(xs[0]), ix.tensor(xs[0])]),
    "Where": where, "Cast": cast, "Identity": identity, "Dropout": dropout,
    # unary math and activations
    "Neg": unary("neg"), "Sqrt": unary("sqrt"), "Exp": unary("exp"), "Log": unary("log"),
    "Abs": unary("abs"), "Reciprocal": unary("reciprocal"), "Sin": unary("sin"),
    "Cos": unary("cos"), "Tanh": unary("tanh"), "Erf": unary("erf"),
    "Relu": unary("relu"), "Sigmoid": unary("sigmoid"), "HardSwish": unary("hardswish"),
    "HardSigmoid": hardsigmoid, "Gelu": gelu, "LeakyRelu": leaky_relu, "Clip": clip,
    # linear algebra and neural-network ops
    "MatMul": binary("matmul"), "Gemm": gemm, "Conv": conv,
    "BatchNormalization": batch_norm, "LayerNormalization": layer_norm,
    "Softmax": softmax("softmax"), "LogSoftmax": softmax("log_softmax"),
    "MaxPool": max_pool, "AveragePool": avg_pool,
    "GlobalAveragePool": global_pool("adaptive_avg_pool2d"), "GlobalMaxPool": global_pool("amax"),
    # reductions
    "ReduceMean": reduction("mean"), "ReduceSum": reduction("sum"),
    "ReduceMax": reduction("amax"),
    **SHAPE_OPS, **RECURRENT_OPS, **INDEX_OPS,
}
