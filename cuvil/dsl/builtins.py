"""The built-in functions of `.cvr` expressions, in one table every stage reads.

A built-in is written once here with: its static signature (which `dsl.expressions`
checks), where it may appear (a `where` guard, a `cost` expression, an attribute computed
on a right-hand side: `eps=value(e)`), where the optimizer keeps its value for egglog
(`type`: a table per type id, `t_NAME`; `class`: a table per e-class; nothing for the
rest), and its meaning: `value(site, *args)`, where a tensor argument is a `Known` (what a
stage knows of that value: its type, whether it is known at compile time, its number if it
is a 0-d constant, what calibration observed of it) and `site` says where the expression is
evaluated (the targets of the compile; in a cost, the node being costed). The optimizer's
tables, the cost model and `rules verify` each gather those facts their own way and take
every value from `value`, so they cannot disagree.

    dim(x, i)   int    guards, costs, attributes   i-th size of x (i < 0 counts from the end)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cuvil.ir.types import TensorType

# Value types of expressions; parameter kinds.
TENSOR, INT, FLOAT, BOOL, STR, TUPLE, ANY, NONE = (
    "tensor", "int", "float", "bool", "str", "tuple", "any", "none")
NUMBER = "number"  # a parameter kind: int or float (and a result: int for int arguments)
INT_LITERAL, STR_LITERAL = "int literal", "string literal"  # parameter kinds
GUARD, COST = "guard", "cost"
# The parameters every compile target has (the default cost's), usable as `target.NAME` in
# any cost; a `target` item may declare more.
ROOFLINE_PARAMS = ("gflops", "gbps", "launch_us")
_NUMERIC_ATTRS = ("int", "float", "number")


@dataclass(frozen=True)
class Known:
    """What a stage knows of a tensor a built-in is asked about."""

    type: TensorType
    const: bool = False  # known at compile time: a constant, or a foldable op of constants
    scalar: float | None = None  # its number, when it is a 0-d constant
    observed: Mapping[str, Any] | None = None  # calibration: absmax, scale, zero_point


@dataclass(frozen=True)
class Site:
    """Where an expression is evaluated."""

    targets: frozenset[str] = frozenset()  # the targets being compiled for
    node: Mapping[str, Callable[[], float]] = field(default_factory=dict)  # a cost's node:
    # its `roofline`, `flops` and `moved`, computed when asked


NOWHERE = Site()


@dataclass(frozen=True)
class BuiltinDef:
    name: str
    params: tuple[str, ...]
    result: str
    where: tuple[str, ...]  # GUARD, COST
    doc: str
    value: Callable[..., Any]  # (site, arguments: a tensor as `Known`) -> value or None
    analysis: str = ""  # "type": kept per type id; "class": kept per e-class
    fills: tuple[str, ...] = ()  # attribute kinds it can compute on a right-hand side


def _dim(s: Site, x: Known, i: int) -> Any:
    return x.type.shape[i] if -x.type.rank <= i < x.type.rank else None


def _observed(name: str) -> Callable[[Site, Known], Any]:
    return lambda s, x: None if x.observed is None else x.observed.get(name)


def _node(name: str) -> Callable[[Site], float]:
    return lambda s: s.node[name]()


TABLE: tuple[BuiltinDef, ...] = (
    BuiltinDef("rank", (TENSOR,), INT, (GUARD, COST), "number of dims",
               lambda s, x: x.type.rank, "type", _NUMERIC_ATTRS),
    BuiltinDef("dim", (TENSOR, INT_LITERAL), INT, (GUARD, COST),
               "i-th size (i < 0 counts from the end)", _dim, "type", _NUMERIC_ATTRS),
    BuiltinDef("numel", (TENSOR,), INT, (GUARD, COST), "number of elements",
               lambda s, x: x.type.numel, "type", _NUMERIC_ATTRS),
    BuiltinDef("bytes", (TENSOR,), INT, (COST,), "size in bytes",
               lambda s, x: x.type.numel * x.type.dtype.itemsize),
    BuiltinDef("shape", (TENSOR,), TUPLE, (GUARD,), "the sizes, as a tuple",
               lambda s, x: tuple(x.type.shape), "type", ("shape", "ints")),
    BuiltinDef("dtype", (TENSOR,), STR, (GUARD, COST), 'element type ("f32", "i64", ...)',
               lambda s, x: str(x.type.dtype), "type", ("dtype", "str")),
    BuiltinDef("layout", (TENSOR,), STR, (GUARD, COST), 'physical layout ("NHWC", ...)',
               lambda s, x: x.type.layout, "type", ("layout", "str")),
    BuiltinDef("device", (TENSOR,), STR, (GUARD, COST), 'device ("cpu", "cuda")',
               lambda s, x: x.type.device, "type", ("device", "str")),
    BuiltinDef("is_float", (TENSOR,), BOOL, (GUARD, COST), "floating-point dtype",
               lambda s, x: x.type.dtype.is_float, "type"),
    BuiltinDef("is_const", (TENSOR,), BOOL, (GUARD,), "known at compile time (a constant, "
               "or a foldable op of constants)", lambda s, x: x.const, "class"),
    BuiltinDef("value", (TENSOR,), FLOAT, (GUARD,), "the number of a 0-d constant",
               lambda s, x: x.scalar, "class", ("float", "optfloat", "number")),
    BuiltinDef("has_target", (STR_LITERAL,), BOOL, (GUARD,), "the target is being compiled for",
               lambda s, name: name in s.targets),
    # Calibration facts (`cuvil.Quantize`): what observers saw of a value over the
    # calibration batches; only values that were observed have them.
    BuiltinDef("calibrated", (TENSOR,), BOOL, (GUARD,), "observed during calibration",
               lambda s, x: x.observed is not None and "scale" in x.observed, "class"),
    BuiltinDef("half_ok", (TENSOR,), BOOL, (GUARD,), "may be computed in f16 "
               "(`Quantize(activations=\"fp16\")`)",
               lambda s, x: x.observed is not None and bool(x.observed.get("half_ok")), "class"),
    BuiltinDef("absmax", (TENSOR,), FLOAT, (GUARD,), "largest |value| observed (clipped by "
               "the calibration method)", _observed("absmax"), "class", ("float", "number")),
    BuiltinDef("scale", (TENSOR,), FLOAT, (GUARD,), "its int8 scale from calibration",
               _observed("scale"), "class", ("float", "number")),
    BuiltinDef("zero_point", (TENSOR,), INT, (GUARD,), "its int8 zero point from calibration",
               _observed("zero_point"), "class", ("int", "number")),
    BuiltinDef("max", (NUMBER, NUMBER), NUMBER, (COST,), "the larger", lambda s, a, b: max(a, b)),
    BuiltinDef("min", (NUMBER, NUMBER), NUMBER, (COST,), "the smaller", lambda s, a, b: min(a, b)),
    BuiltinDef("roofline", (), FLOAT, (COST,), "this node's default cost, to scale or adjust",
               _node("roofline")),
    BuiltinDef("flops", (), FLOAT, (COST,), "this node's arithmetic (the catalog's count)",
               _node("flops")),
    BuiltinDef("moved", (), FLOAT, (COST,), "bytes this node reads and writes", _node("moved")),
)
BUILTINS: dict[str, BuiltinDef] = {b.name: b for b in TABLE}


def allowed(where: str) -> tuple[str, ...]:
    """Names of the built-ins an expression of this kind (`GUARD`, `COST`) may call."""
    return tuple(b.name for b in TABLE if where in b.where)


def analyses(kind: str) -> dict[str, str]:
    """The built-ins the optimizer keeps per type id (`"type"`) or per e-class (`"class"`),
    with their result types."""
    return {b.name: b.result for b in TABLE if b.analysis == kind}


# Built-ins a right-hand side may use to compute an attribute from the match, with the
# attribute kinds each can fill: `layer_norm(x, g, b, normalized_shape=shape(g))`.
COMPUTED: dict[str, tuple[str, ...]] = {b.name: b.fills for b in TABLE if b.fills}
