"""Elementwise ops: broadcasting binary arithmetic, unary math and activations, where.

Type rule: the shape broadcasts (numpy rules, symbolic dims allowed); the dtype follows
torch promotion, a 0-d operand not promoting a dimensioned one of the same category and a
weak one (a number) not promoting any tensor of the same category; the
layout is that of the first input with the output's shape; all non-scalar inputs share one
device (a 0-d result is on the first's that is not a number).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cuvil.ir.types import Dim, DType, TensorType, default_layout
from cuvil.ops.draw import arith
from cuvil.ops.element import evaluate as element_evaluate
from cuvil.ops.element import parse as element_parse
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


def result_dtype(types: list[TensorType]) -> DType:
    """torch's promotion: dimensioned operands decide within their category; 0-d operands
    only count when of a higher category (a float 0-d makes an integer result float), and
    weak ones (numbers) only when of a higher category than every tensor, as the default
    dtype of their category (f32, i64, bool)."""
    tiers = ([t.dtype for t in types if t.rank > 0 and not t.weak],
             [t.dtype for t in types if t.rank == 0 and not t.weak],
             [_weak_dtype(t.dtype) for t in types if t.weak])
    result = None
    for dtypes in reversed(tiers):
        if dtypes:
            higher = promote(*dtypes)
            result = higher if result is None else _combine(higher, result)
    return result


def _weak_dtype(dtype: DType) -> DType:
    return DType.f32 if dtype.is_float else DType.bool if dtype is DType.bool else DType.i64


def _combine(higher: DType, lower: DType) -> DType:
    """torch's `combine_categories`: the stronger tier's dtype unless the weaker one is of
    a higher category."""
    if higher.is_float:
        return higher
    if higher is DType.bool or lower.is_float:
        return promote(higher, lower)
    return higher


def elementwise_type(types: list[TensorType], dtype: DType | None = None) -> TensorType:
    shape = broadcast_shapes(*(t.shape for t in types))
    strong = [t for t in types if not t.weak] or types  # a number has no device
    devices = {t.device for t in strong if t.rank > 0} or {strong[0].device}
    check(len(devices) == 1, f"inputs on different devices: {', '.join(sorted(devices))}")
    same = [t.layout for t in types if t.shape == shape]
    layout = same[0] if same else default_layout(len(shape))
    return TensorType(shape, dtype or result_dtype(types), layout, devices.pop())


def elementwise_op(name: str, element: str, inputs: tuple[str, ...] = ("x",),
                   attrs: tuple[AttrSpec, ...] = (), doc: str = "", **fields) -> OpDef:
    """An elementwise op defined by its element expression: its type broadcasts its inputs,
    its reference is the expression computed with torch, and so is its kernel."""
    names = (*inputs, *(a.name for a in attrs))
    element_parse(element, names)  # fail at definition, not at first use
    out = fields.pop("out_dtype", None)
    draw = fields.pop("shapes", arith.broadcasting if len(inputs) > 1 else arith.unary)

    def ref(xs, a):
        return element_evaluate(element, {**dict(zip(inputs, xs, strict=True)), **a})

    return OpDef(name, inputs, attrs,
                 lambda ts, a: elementwise_type(ts, DType(out) if out else None), ref,
                 ELEMENTWISE, doc=doc or element, element=element, out_dtype=out,
                 shapes=draw, **fields)


def _binary(name: str, fn, element: str, out_dtype: DType | None = None) -> None:
    out = out_dtype.value if out_dtype else None
    register(OpDef(name, ("x", "y"), (), lambda ts, a: elementwise_type(ts, out_dtype),
                   lambda xs, a: fn(xs[0], xs[1]), ELEMENTWISE, doc=element, element=element,
                   out_dtype=out, shapes=arith.broadcasting))


def _unary(name: str, fn, element: str, attrs: tuple[AttrSpec, ...] = (),
           float_out: bool = True, **fields) -> None:
    def infer(ts, a):
        t = elementwise_type(ts)
        return t.with_(dtype=DType.f32) if float_out and not t.dtype.is_float else t

    register(OpDef(name, ("x",), attrs, infer, lambda xs, a: fn(xs[0], **a), ELEMENTWISE,
                   doc=fields.pop("doc", element), element=element, shapes=arith.unary, **fields))


for _name, _fn, _element in [
    ("add", torch.add, "x + y"), ("sub", torch.sub, "x - y"), ("mul", torch.mul, "x * y"),
    ("maximum", torch.maximum, "max(x, y)"), ("minimum", torch.minimum, "min(x, y)"),
]:
    _binary(_name, _fn, _element)
register(OpDef("pow", ("x", "y"), (), lambda ts, a: elementwise_type(ts),
               lambda xs, a: torch.pow(xs[0], xs[1]), ELEMENTWISE, doc="x ** y", work=8,
               shapes=arith.broadcasting, domain="positive"))
register(OpDef("div", ("x", "y"), (),
               lambda ts, a: elementwise_type(
                   ts, None if result_dtype(ts).is_float else DType.f32),
               lambda xs, a: torch.div(xs[0], xs[1]), ELEMENTWISE, doc="x / y (true division)",
               element="x / y", shapes=arith.broadcasting))

for _name, _fn, _element in [
    ("eq", torch.eq, "x == y"), ("ne", torch.ne, "x != y"), ("lt", torch.lt, "x < y"),
    ("le", torch.le, "x <= y"), ("gt", torch.gt, "x > y"), ("ge", torch.ge, "x >= y"),
    ("logical_and", torch.logical_and, "x & y"), ("logical_or", torch.logical_or, "x | y"),
]:
    _binary(_name, _fn, _element, DType.bool)

for _name, _fn, _element, _more in [
    ("sqrt", torch.sqrt, "sqrt(x)", {"domain": "positive"}),
    ("rsqrt", torch.rsqrt, "1 / sqrt(x)", {"domain": "positive"}),
    ("exp", torch.exp, "exp(x)", {"work": 8}),
    ("log", torch.log, "log(x)", {"work": 8, "domain": "positive"}),
    ("tanh", torch.tanh, "tanh(x)", {"work": 8}), ("erf", torch.erf, "erf(x)", {"work": 8}),
    ("sin", torch.sin, "sin(x)", {"work": 8}), ("cos", torch.cos, "cos(x)", {"work": 8}),
    ("sigmoid", torch.sigmoid, "sigmoid(x)", {"work": 8}),
    ("silu", F.silu, "x * sigmoid(x)", {"work": 8, "float_only": True}),
    ("reciprocal", torch.reciprocal, "1 / x", {}),
]:
    _unary(_name, _fn, _element, **_more)

for _name, _fn, _element in [("neg", torch.neg, "-x"), ("relu", torch.relu, "max(x, 0)"),
                             ("abs", torch.abs, "abs(x)"),
                             ("relu6", lambda x: F.hardtanh(x, 0.0, 6.0), "min(max(x, 0), 6)")]:
    _unary(_name, _fn, _element, float_out=False)

# MobileNetV3's activations, defined by the chains they replace (torch's order of operations;
# their reference and kernel are these expressions, as `fusion/activations.cvr` relies on)
register(elementwise_op("hardsigmoid", "min(max(x + 3, 0), 6) / 6", work=3, float_only=True,
                        doc="relu6(x + 3) / 6"))
register(elementwise_op("hardswish", "x * min(max(x + 3, 0), 6) / 6", work=4,
                        float_only=True, doc="x * relu6(x + 3) / 6"))
register(OpDef("logical_not", ("x",), (), lambda ts, a: ts[0].with_(dtype=DType.bool),
               lambda xs, a: torch.logical_not(xs[0]), ELEMENTWISE, doc="not x",
               element="not x", out_dtype="bool", shapes=arith.unary))
_unary("hardtanh", lambda x, min_val, max_val: F.hardtanh(x, min_val, max_val),
       "min(max(x, min_val), max_val)",
       (AttrSpec("min_val", "float", -1.0, samples=(-1.0, 0.0, -0.5)),
        AttrSpec("max_val", "float", 1.0, samples=(1.0, 6.0, 0.5))), float_out=False)


def _clamp_type(ts: list[TensorType], a) -> TensorType:
    """Number bounds promote like 0-d operands: a float bound makes an integer x float. As in
    torch, x counts as dimensioned even when 0-d (an f16 x stays f16)."""
    bounds = [TensorType((), DType.f32 if isinstance(b, float) else DType.i64)
              for b in (a["min"], a["max"]) if b is not None]
    x = ts[0] if ts[0].rank else ts[0].with_(shape=(1,))
    return elementwise_type(ts).with_(dtype=result_dtype([x, *bounds]))


def _clamp(x: torch.Tensor, a) -> torch.Tensor:
    if a["min"] is None and a["max"] is None:
        return x
    return torch.clamp(x, a["min"], a["max"])


register(OpDef("clamp", ("x",), (AttrSpec("min", "any", None, samples=(None, -1.0, 0.0, -0.5)),
                                 AttrSpec("max", "any", None, samples=(None, 1.0, 6.0, 0.5))),
               _clamp_type, lambda xs, a: _clamp(xs[0], a), ELEMENTWISE,
               doc="clamp(x, min, max); None: open", shapes=arith.unary))
_unary("gelu", lambda x, approximate: F.gelu(x, approximate=approximate), "",
       (AttrSpec("approximate", "str", "none", samples=("none", "tanh")),), work=8,
       float_only=True, doc='x*Phi(x); approximate="tanh" uses the tanh form')
_unary("dropout", lambda x, p: x, "x", (AttrSpec("p", "float", 0.5, samples=(0.1, 0.5)),),
       float_out=False, lowering="alias", foldable=False, doc="identity at inference")


def _where_type(ts: list[TensorType], a) -> TensorType:
    check(ts[0].dtype is DType.bool, f"where: condition must be bool, not {ts[0].dtype}")
    t = elementwise_type(ts)
    return t.with_(dtype=result_dtype(ts[1:]))


register(OpDef("where", ("cond", "x", "y"), (), _where_type,
               lambda xs, a: torch.where(xs[0], xs[1], xs[2]), ELEMENTWISE,
               doc="cond ? x : y", element="x if cond else y", shapes=arith.broadcasting))


def _masked_fill_type(ts: list[TensorType], a) -> TensorType:
    check(ts[1].dtype is DType.bool, f"masked_fill: mask must be bool, not {ts[1].dtype}")
    t = elementwise_type(ts)
    check(t.shape == ts[0].shape, "masked_fill: mask must broadcast to x")
    return t.with_(dtype=ts[0].dtype, layout=ts[0].layout)


register(OpDef("masked_fill", ("x", "mask"), (AttrSpec("value", "float"),), _masked_fill_type,
               lambda xs, a: xs[0].masked_fill(xs[1], a["value"]), ELEMENTWISE,
               doc="mask ? value : x", element="value if mask else x", shapes=arith.broadcasting))
