"""The aten -> Cuvil mapping: one small converter per aten op family, and the table of them.

A converter gets the importer `ix` and the op's arguments by schema name (`a["input"]` for
`self`; tensors as `Value`s, sizes as dims, lists as tuples) and returns the value it built,
or a tuple of values for an op with several results (`None` for a result Cuvil does not
build). Primitive ops carry no bias: `linear(x, W, b)` becomes `add(matmul(x, W.T), b)` with
`W.T` a constant computed at import. A converter that meets arguments it cannot map raises
`Fallback` (`converter.py`), and the op runs through torch as an opaque `torch_op`. Shape
ops have their own module, `aten_shape`, and so do `nn.LSTM` and `nn.GRU`, `aten_recurrent`,
and tensors made from sizes, `aten_source`; the table below holds them too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from cuvil.frontend.aten_batch_norm import BATCH_NORM_OPS
from cuvil.frontend.aten_conv_backward import CONV_BACKWARD_OPS
from cuvil.frontend.aten_gradients import GRADIENT_OPS, scatter_sum
from cuvil.frontend.aten_index import INDEX_OPS
from cuvil.frontend.aten_layer_norm import LAYER_NORM_OPS
from cuvil.frontend.aten_recurrent import RECURRENT_OPS
from cuvil.frontend.aten_shape import SHAPE_OPS
from cuvil.frontend.aten_source import SOURCE_OPS, need_host
from cuvil.frontend.converter import Args, Fallback, Value, need
from cuvil.ir.recipe import Call, Ref, transposed
from cuvil.ops.nn import pair

if TYPE_CHECKING:
    from cuvil.frontend.importer import Importer

__all__ = ["ATEN", "Args", "Fallback", "Value"]


# -- elementwise -----------------------------------------------------------------------------
def unary(op: str, **attrs) -> Callable:
    return lambda ix, a: ix.add(op, [ix.tensor(a["input"])], attrs)


def binary(op: str, second: str = "other") -> Callable:
    return lambda ix, a: ix.add(op, [ix.tensor(a["input"]), ix.tensor(a[second])])


def add_sub(op: str, reverse: bool = False) -> Callable:
    """`add`/`sub`/`rsub` with torch's `alpha` multiplier on the second operand."""

    def convert(ix: Importer, a: Args) -> Value:
        x, y = ix.tensor(a["input"]), ix.tensor(a["other"])
        if reverse:
            x, y = y, x
        summed = scatter_sum(ix, x, y) if op == "add" and a.get("alpha", 1) == 1 else None
        if summed is not None:
            return summed
        if a.get("alpha", 1) != 1:
            y = ix.add("mul", [y, ix.tensor(a["alpha"])])
        return ix.add(op, [x, y])

    return convert


def div(ix: Importer, a: Args) -> Value:
    need(a.get("rounding_mode") is None, "rounding division")
    return ix.add("div", [ix.tensor(a["input"]), ix.tensor(a["other"])])


def boolean(op: str) -> Callable:
    """bitwise and/or/not on bools are the logical ops; on integers they stay in torch."""

    def convert(ix: Importer, a: Args) -> Value:
        xs = [ix.tensor(a[k]) for k in ("input", "other") if k in a]
        need(all(ix.type(x).dtype == "bool" for x in xs), "bitwise op on integers")
        return ix.add(op, xs)

    return convert


def hardtanh(ix: Importer, a: Args) -> Value:
    x, lo, hi = ix.tensor(a["input"]), float(a["min_val"]), float(a["max_val"])
    if (lo, hi) == (0.0, 6.0):
        return ix.add("relu6", [x])
    return ix.add("hardtanh", [x], {"min_val": lo, "max_val": hi})


def clamp(ix: Importer, a: Args) -> Value:
    """Number bounds are `clamp`'s attributes; a tensor bound is `maximum` (the lower) or
    `minimum` (the upper), in torch's order: min(max(x, lo), hi), NaN from either side."""
    x, lo, hi = ix.tensor(a["input"]), a.get("min"), a.get("max")
    if not isinstance(lo, Value) and not isinstance(hi, Value):
        return ix.add("clamp", [x], {"min": lo, "max": hi})
    for bound, op, attr in ((lo, "maximum", "min"), (hi, "minimum", "max")):
        if isinstance(bound, Value):
            x = ix.add(op, [x, bound])
        elif bound is not None:
            x = ix.add("clamp", [x], {"min": None, "max": None, attr: bound})
    return x


def min_max(op: str) -> Callable:
    """`min`/`max` of two tensors (`min.other`) is `minimum`/`maximum`; the reductions
    (`min.dim`, `min()`) stay in torch."""

    def convert(ix: Importer, a: Args) -> Value:
        need(isinstance(a.get("other"), Value), f"{op} as a reduction")
        return ix.add(op, [ix.tensor(a["input"]), a["other"]])

    return convert


def dropout(ix: Importer, a: Args) -> Value:
    need(not a["train"], "dropout in training mode")
    return ix.add("dropout", [ix.tensor(a["input"])], {"p": float(a["p"])})


def where(ix: Importer, a: Args) -> Value:
    need("input" in a, "where(condition) without values")
    return ix.add("where", [ix.tensor(a["condition"]), ix.tensor(a["input"]),
                            ix.tensor(a["other"])])


def threshold_backward(ix: Importer, a: Args) -> Value:
    """ReLU's gradient: `grad_output` where `input > threshold`, else 0 (a NaN input passes
    its gradient, as in torch), an elementwise op that fuses with the ops around it."""
    grad, x = ix.tensor(a["grad_output"]), ix.tensor(a["input"])
    mask = ix.add("le", [x, ix.tensor(float(a["threshold"]))])
    return ix.add("masked_fill", [grad, mask], {"value": 0.0})


def masked_fill(ix: Importer, a: Args) -> Value:
    need(not isinstance(a["value"], Value), "masked_fill with a tensor value")
    return ix.add("masked_fill", [ix.tensor(a["input"]), ix.tensor(a["mask"])],
                  {"value": a["value"]})


def identity(ix: Importer, a: Args) -> Value:
    return ix.tensor(a["input"])


def copy(ix: Importer, a: Args) -> Value:
    """`copy(self, src)`, the functional form of `self.copy_(src)` (a write through a view
    made functional uses it): src's values, where they already have self's shape and dtype."""
    src, dst = ix.type(ix.tensor(a["src"])), ix.type(ix.tensor(a["input"]))
    need(src.dtype == dst.dtype and src.shape == dst.shape, "copy with a cast or broadcast")
    return ix.tensor(a["src"])


def cast(ix: Importer, a: Args) -> Value:
    """`.to(dtype)` and friends; moving to another device or layout stays in torch."""
    x = ix.tensor(a["input"])
    need_host(a.get("device"), "device move")
    need(a.get("layout") in (None, torch.strided), "layout change")
    dtype = a["other"] if "other" in a else a.get("dtype")
    if isinstance(dtype, Value):
        dtype = ix.type(dtype).dtype.torch
    if dtype is None or ix.type(x).dtype.torch == dtype:
        return x
    from cuvil.ir.types import DType

    return ix.add("cast", [x], {"dtype": str(DType.from_torch(dtype))})


# -- linear algebra --------------------------------------------------------------------------
def matmul(op: str) -> Callable:
    return lambda ix, a: ix.add(op, [ix.tensor(a["input"]), ix.tensor(a.get("other",
                                                                            a.get("mat2")))])


def transpose(ix: Importer, a: Args) -> Value:
    """`t`/`transpose`; the transpose of a constant is folded into a new constant."""
    x = ix.tensor(a["input"])
    rank = ix.type(x).rank
    if rank < 2 and "dim0" not in a:
        return x
    d0, d1 = a.get("dim0", 0), a.get("dim1", 1)
    if ix.constant(x) is not None and sorted((d0 % rank, d1 % rank)) == [rank - 2, rank - 1]:
        return ix.computed(ix.ref(x) + ".T", Call(transposed, (Ref(ix.ref(x)), d0, d1)))
    return ix.add("transpose", [x], {"dim0": d0, "dim1": d1})


def weight_t(ix: Importer, w: Value) -> Value:
    return transpose(ix, {"input": w, "dim0": -2, "dim1": -1})


def linear(ix: Importer, a: Args) -> Value:
    y = ix.add("matmul", [ix.tensor(a["input"]), weight_t(ix, ix.tensor(a["weight"]))])
    return y if a["bias"] is None else ix.add("add", [y, ix.tensor(a["bias"])])


def addmm(ix: Importer, a: Args) -> Value:
    need(a["beta"] == 1 and a["alpha"] == 1, "addmm with alpha/beta")
    y = ix.add("matmul", [ix.tensor(a["mat1"]), ix.tensor(a["mat2"])])
    return ix.add("add", [y, ix.tensor(a["input"])])


# -- neural-network ops ----------------------------------------------------------------------
def conv2d(ix: Importer, a: Args) -> Value:
    x, w = ix.tensor(a["input"]), ix.tensor(a["weight"])
    need(ix.type(w).rank == 4 and not a.get("transposed"), "not a 2-d convolution")
    padding = a["padding"]
    if isinstance(padding, str):
        padding = _same_padding(ix.type(w).shape[2:], pair(a["dilation"]), padding)
    attrs = {"stride": pair(a["stride"]), "padding": pair(padding),
             "dilation": pair(a["dilation"]), "groups": a["groups"]}
    y = ix.add("conv2d", [x, w], attrs)
    return y if a["bias"] is None else ix.add("add", [y, channel_bias(ix, a["bias"])])


def conv1d(ix: Importer, a: Args) -> Value:
    """A 1-d convolution is a 2-d one over a height of 1: x [N, C, L] as [N, C, 1, L]."""
    x, w = ix.tensor(a["input"]), ix.tensor(a["weight"])
    need(ix.type(w).rank == 3 and not a.get("transposed"), "not a 1-d convolution")
    need(ix.type(x).rank == 3 and isinstance(ix.type(x).shape[2], int),
         "an unbatched input or a symbolic length (conv2d kernels take static widths)")
    w = ix.computed(ix.ref(w) + ".2d", Call(torch.unsqueeze, (Ref(ix.ref(w)), 2))) \
        if ix.constant(w) is not None else ix.add("unsqueeze", [w], {"dim": 2})
    padding = a["padding"] if isinstance(a["padding"], str) else (0, *a["padding"])
    y = conv2d(ix, {**a, "input": ix.add("unsqueeze", [x], {"dim": 2}), "weight": w,
                    "padding": padding, "stride": (1, *a["stride"]),
                    "dilation": (1, *a["dilation"]), "transposed": False})
    return ix.add("squeeze", [y], {"dim": (2,)})


def _same_padding(kernel, dilation, mode: str) -> tuple[int, int]:
    if mode == "valid":
        return (0, 0)
    totals = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
    need(mode == "same" and all(t % 2 == 0 for t in totals), f"padding={mode!r}")
    return tuple(t // 2 for t in totals)


def channel_bias(ix: Importer, bias: Value) -> Value:
    """A bias of shape (C,) as (C, 1, 1), to broadcast over NCHW (a constant if it is one)."""
    if ix.constant(bias) is not None:
        return ix.computed(ix.ref(bias) + ".bcast",
                           Call(torch.reshape, (Ref(ix.ref(bias)), (-1, 1, 1))))
    return ix.add("reshape", [bias], {"shape": (ix.type(bias).shape[0], 1, 1)})


def softmax(op: str) -> Callable:
    def convert(ix: Importer, a: Args) -> Value:
        need(a.get("dtype") is None and not a.get("half_to_float"), "softmax with a dtype")
        return ix.add(op, [ix.tensor(a["input"])], {"dim": a["dim"]})

    return convert


def _max_pool_attrs(a: Args) -> dict:
    return {"kernel_size": pair(a["kernel_size"]),
            "stride": pair(a["stride"]) if a["stride"] else (),
            "padding": pair(a["padding"]), "dilation": pair(a["dilation"]),
            "ceil_mode": bool(a["ceil_mode"])}


def max_pool2d(ix: Importer, a: Args) -> Value | tuple:
    """The pool; `max_pool2d_with_indices` also gives the indices, their own op (a graph
    that never reads them drops it)."""
    x, attrs = ix.tensor(a["input"]), _max_pool_attrs(a)
    y = ix.add("max_pool2d", [x], attrs)
    if "with_indices" not in ix.op_name():
        return y
    return y, ix.add("max_pool2d_indices", [x], attrs)


def max_pool2d_backward(ix: Importer, a: Args) -> Value:
    """`max_pool2d_with_indices_backward`: the gradient scattered to the saved indices."""
    inputs = [ix.tensor(a[k]) for k in ("grad_output", "input", "indices")]
    return ix.add("max_pool2d_backward", inputs, _max_pool_attrs(a))


def avg_pool2d(ix: Importer, a: Args) -> Value:
    need(a["divisor_override"] is None, "avg_pool2d with divisor_override")
    attrs = {"kernel_size": pair(a["kernel_size"]),
             "stride": pair(a["stride"]) if a["stride"] else (),
             "padding": pair(a["padding"]), "ceil_mode": bool(a["ceil_mode"]),
             "count_include_pad": bool(a["count_include_pad"])}
    return ix.add("avg_pool2d", [ix.tensor(a["input"])], attrs)


def adaptive_avg_pool2d(ix: Importer, a: Args) -> Value:
    return ix.add("adaptive_avg_pool2d", [ix.tensor(a["input"])],
                  {"output_size": pair(a["output_size"])})


def embedding(ix: Importer, a: Args) -> Value:
    return ix.add("embedding", [ix.tensor(a["weight"]), ix.tensor(a["indices"])])


def attention(ix: Importer, a: Args) -> Value:
    need(a["dropout_p"] == 0 and not a["enable_gqa"], "attention dropout or GQA")
    qkv = [ix.tensor(a[k]) for k in ("query", "key", "value")]
    mask = [ix.tensor(a["attn_mask"])] if a["attn_mask"] is not None else []
    return ix.add("scaled_dot_product_attention", qkv + mask,
                  {"is_causal": bool(a["is_causal"]), "scale": a["scale"]})


# -- reductions ------------------------------------------------------------------------------
def reduction(op: str) -> Callable:
    def convert(ix: Importer, a: Args) -> Value:
        need(a.get("dtype") is None, f"{op} with a dtype")
        dims = a.get("dim")
        dims = () if dims is None else tuple(dims) if isinstance(dims, tuple) else (dims,)
        return ix.add(op, [ix.tensor(a["input"])],
                      {"dim": dims, "keepdim": bool(a.get("keepdim", False))})

    return convert


def variance(ix: Importer, a: Args) -> Value:
    """`var` by `correction` or the older `unbiased`. (`var_mean` runs in torch: its
    Welford mean is NaN where an infinity meets other values, where `mean` is infinite.)"""
    correction = a.get("correction")
    if correction is None:
        correction = 1 if a.get("unbiased", True) else 0
    need(float(correction).is_integer(), f"a correction of {correction}")
    dims = a.get("dim")
    dims = () if dims is None else tuple(dims) if isinstance(dims, tuple | list) else (dims,)
    return ix.add("var", [ix.tensor(a["input"])], {"dim": dims, "correction": int(correction),
                                                   "keepdim": bool(a.get("keepdim"))})


# -- the table: aten op (overload packet) -> converter ----------------------------------------
ATEN: dict[str, Callable[[Importer, Args], Any]] = {
    # elementwise arithmetic
    "add": add_sub("add"), "sub": add_sub("sub"), "rsub": add_sub("sub", reverse=True),
    "mul": binary("mul"), "div": div, "pow": binary("pow", "exponent"),
    "maximum": binary("maximum"), "minimum": binary("minimum"),
    "max": min_max("maximum"), "min": min_max("minimum"),
    "eq": binary("eq"), "ne": binary("ne"), "lt": binary("lt"), "le": binary("le"),
    "gt": binary("gt"), "ge": binary("ge"),
    "logical_and": binary("logical_and"), "logical_or": binary("logical_or"),
    "logical_not": unary("logical_not"), "bitwise_and": boolean("logical_and"),
    "bitwise_or": boolean("logical_or"), "bitwise_not": boolean("logical_not"),
    "__and__": boolean("logical_and"), "__or__": boolean("logical_or"),
    # unary math and activations
    "neg": unary("neg"), "sqrt": unary("sqrt"), "rsqrt": unary("rsqrt"), "exp": unary("exp"),
    "log": unary("log"), "tanh": unary("tanh"), "erf": unary("erf"),
    "sin": unary("sin"), "cos": unary("cos"),
    "sigmoid": unary("sigmoid"), "silu": unary("silu"), "reciprocal": unary("reciprocal"),
    "relu": unary("relu"), "relu6": unary("relu6"), "abs": unary("abs"),
    "hardsigmoid": unary("hardsigmoid"), "hardswish": unary("hardswish"),
    "gelu": lambda ix, a: ix.add("gelu", [ix.tensor(a["input"])],
                                 {"approximate": a["approximate"]}),
    "hardtanh": hardtanh, "clamp": clamp, "clamp_min": clamp, "clamp_max": clamp,
    "dropout": dropout, "where": where, "masked_fill": masked_fill,
    "threshold_backward": threshold_backward,
    # tensors made from sizes (masks)
    **SOURCE_OPS,
    # no-ops and conversions
    "copy": copy,
    "clone": identity, "contiguous": identity, "alias": identity, "detach": identity,
    "detach_": identity,
    "lift_fresh_copy": identity, "_to_copy": cast, "to": cast, "type_as": cast,
    # linear algebra
    "matmul": matmul("matmul"), "mm": matmul("matmul"), "bmm": matmul("bmm"),
    "linear": linear, "addmm": addmm, "t": transpose, "transpose": transpose,
    # neural-network ops
    "conv2d": conv2d, "conv1d": conv1d,
    "convolution": lambda ix, a: (conv1d if ix.type(ix.tensor(a["weight"])).rank == 3
                                  else conv2d)(ix, a),
    **BATCH_NORM_OPS,
    **LAYER_NORM_OPS,
    "softmax": softmax("softmax"), "_softmax": softmax("softmax"),
    "log_softmax": softmax("log_softmax"), "_log_softmax": softmax("log_softmax"),
    "max_pool2d": max_pool2d, "max_pool2d_with_indices": max_pool2d,
    "max_pool2d_with_indices_backward": max_pool2d_backward,
    "avg_pool2d": avg_pool2d, "adaptive_avg_pool2d": adaptive_avg_pool2d,
    "_adaptive_avg_pool2d": adaptive_avg_pool2d, "embedding": embedding,
    "scaled_dot_product_attention": attention, **RECURRENT_OPS, **GRADIENT_OPS,
    **CONV_BACKWARD_OPS,
    # reductions
    "sum": reduction("sum"), "mean": reduction("mean"), "var": variance, "amax": reduction("amax"),
    # shape ops
    **SHAPE_OPS,
    # scans and advanced indexing
    **INDEX_OPS,
}
