"""Elementwise ops: broadcasting binary arithmetic, unary math and activations, where.

Type rule: the shape broadcasts (numpy rules, symbolic dims allowed); the dtype follows
torch promotion, a 0-d operand not promoting a dimensioned one of the same category; the
layout is that of the first input with the output's shape; all non-scalar inputs share one
device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cuvil.ir.types import Dim, DType, TensorType, default_layout
from cuvil.ops.registry import ELEMENTWISE, AttrSpec, OpDef, check, promote, register


def broadcast_shapes(*shapes: tuple[Dim, ...]) -> tuple[Dim, ...]:
    rank = max(len(s) for s in shapes)
    out: list[Dim] = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0}
        dims.discard(1)
        check(len(dims) <= 1, f"shapes {' and '.join(map(_fmt, shapes))} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _fmt(shape) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def _category(d: DType) -> int:
    return 2 if d.is_float else (0 if d is DType.bool else 1)


def result_dtype(types: list[TensorType]) -> DType:
    """torch's rule: 0-d operands only count when they are of a higher category."""
    dimensioned = [t.dtype for t in types if t.rank > 0] or [t.dtype for t in types]
    result = promote(*dimensioned)
    for t in types:
        if t.rank == 0 and _category(t.dtype) > _category(result):
            result = DType.f32 if t.dtype.is_float else promote(result, t.dtype)
    return result


def elementwise_type(types: list[TensorType], dtype: DType | None = None) -> TensorType:
    shape = broadcast_shapes(*(t.shape for t in types))
    devices = {t.device for t in types if t.rank > 0} or {types[0].device}
    check(len(devices) == 1, f"inputs on different devices: {', '.join(sorted(devices))}")
    same = [t.layout for t in types if t.shape == shape]
    layout = same[0] if same else default_layout(len(shape))
    return TensorType(shape, dtype or result_dtype(types), layout, devices.pop())


def _binary(name: str, fn, doc: str, out_dtype: DType | None = None) -> None:
    register(OpDef(name, ("x", "y"), (), lambda ts, a: elementwise_type(ts, out_dtype),
                   lambda xs, a: fn(xs[0], xs[1]), ELEMENTWISE, doc=doc))


def _unary(name: str, fn, doc: str, attrs: tuple[AttrSpec, ...] = (),
           float_out: bool = True) -> None:
    def infer(ts, a):
        t = elementwise_type(ts)
        return t.with_(dtype=DType.f32) if float_out and not t.dtype.is_float else t

    register(OpDef(name, ("x",), attrs, infer, lambda xs, a: fn(xs[0], **a), ELEMENTWISE,
                   doc=doc))


for _name, _fn, _doc in [
    ("add", torch.add, "x + y"), ("sub", torch.sub, "x - y"), ("mul", torch.mul, "x * y"),
    ("pow", torch.pow, "x ** y"), ("maximum", torch.maximum, "max(x, y)"),
    ("minimum", torch.minimum, "min(x, y)"),
]:
    _binary(_name, _fn, _doc)

register(OpDef("div", ("x", "y"), (),
               lambda ts, a: elementwise_type(
                   ts, None if result_dtype(ts).is_float else DType.f32),
               lambda xs, a: torch.div(xs[0], xs[1]), ELEMENTWISE, doc="x / y (true division)"))

for _name, _fn in [("eq", torch.eq), ("ne", torch.ne), ("lt", torch.lt), ("le", torch.le),
                   ("gt", torch.gt), ("ge", torch.ge), ("logical_and", torch.logical_and),
                   ("logical_or", torch.logical_or)]:
    _binary(_name, _fn, f"{_name}(x, y), boolean", DType.bool)

for _name, _fn, _doc in [
    ("neg", torch.neg, "-x"), ("sqrt", torch.sqrt, "sqrt(x)"), ("rsqrt", torch.rsqrt, "1/sqrt(x)"),
    ("exp", torch.exp, "e**x"), ("log", torch.log, "ln(x)"), ("tanh", torch.tanh, "tanh(x)"),
    ("erf", torch.erf, "erf(x)"), ("sigmoid", torch.sigmoid, "1/(1+e**-x)"),
    ("silu", F.silu, "x*sigmoid(x)"), ("reciprocal", torch.reciprocal, "1/x"),
]:
    _unary(_name, _fn, _doc)

for _name, _fn, _doc in [("relu", torch.relu, "max(x, 0)"), ("abs", torch.abs, "|x|"),
                         ("relu6", lambda x: F.hardtanh(x, 0.0, 6.0), "min(max(x, 0), 6)")]:
    _unary(_name, _fn, _doc, float_out=False)

register(OpDef("logical_not", ("x",), (), lambda ts, a: ts[0].with_(dtype=DType.bool),
               lambda xs, a: torch.logical_not(xs[0]), ELEMENTWISE, doc="not x"))
_unary("hardtanh", lambda x, min_val, max_val: F.hardtanh(x, min_val, max_val),
       "clamp(x, min_val, max_val)",
       (AttrSpec("min_val", "float", -1.0), AttrSpec("max_val", "float", 1.0)), float_out=False)
_unary("clamp", lambda x, min, max: torch.clamp(x, min, max), "clamp(x, min, max); None: open",
       (AttrSpec("min", "any", None), AttrSpec("max", "any", None)), float_out=False)
_unary("gelu", lambda x, approximate: F.gelu(x, approximate=approximate),
       'x*Phi(x); approximate="tanh" uses the tanh form',
       (AttrSpec("approximate", "str", "none"),))
_unary("dropout", lambda x, p: x, "identity at inference", (AttrSpec("p", "float", 0.5),),
       float_out=False)


def _where_type(ts: list[TensorType], a) -> TensorType:
    check(ts[0].dtype is DType.bool, f"where: condition must be bool, not {ts[0].dtype}")
    t = elementwise_type(ts)
    return t.with_(dtype=result_dtype(ts[1:]))


register(OpDef("where", ("cond", "x", "y"), (), _where_type,
               lambda xs, a: torch.where(xs[0], xs[1], xs[2]), ELEMENTWISE,
               doc="cond ? x : y"))


def _masked_fill_type(ts: list[TensorType], a) -> TensorType:
    check(ts[1].dtype is DType.bool, f"masked_fill: mask must be bool, not {ts[1].dtype}")
    t = elementwise_type(ts)
    check(t.shape == ts[0].shape, "masked_fill: mask must broadcast to x")
    return t.with_(dtype=ts[0].dtype, layout=ts[0].layout)


register(OpDef("masked_fill", ("x", "mask"), (AttrSpec("value", "float"),), _masked_fill_type,
               lambda xs, a: xs[0].masked_fill(xs[1], a["value"]), ELEMENTWISE,
               doc="mask ? value : x"))
