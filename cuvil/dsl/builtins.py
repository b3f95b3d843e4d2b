"""The built-in functions of `.cvr` expressions, in one table every stage reads.

A built-in is written once here with: its static signature (which `dsl.expressions`
checks), where it may appear (a `where` guard, a `cost` expression, an attribute computed
on a right-hand side: `eps=value(e)`), where the optimizer keeps its value for egglog
(`type`: a table per type id, `t_NAME`; `class`: a table per e-class; nothing for the
rest), and its value, computed from a tensor's type. The optimizer's type table, the cost
model and `rules verify` all take the value from `value`, so the three cannot disagree.

    dim(x, i)   int    guards, costs, attributes   i-th size of x (i < 0 counts from the end)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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
class BuiltinDef:
    name: str
    params: tuple[str, ...]
    result: str
    where: tuple[str, ...]  # GUARD, COST
    doc: str
    value: Callable[..., Any] | None = None  # (type of the first argument, other args)
    analysis: str = ""  # "type": kept per type id; "class": kept per e-class
    fills: tuple[str, ...] = ()  # attribute kinds it can compute on a right-hand side


def _dim(t: TensorType, i: int) -> Any:
    return t.shape[i] if -t.rank <= i < t.rank else None


TABLE: tuple[BuiltinDef, ...] = (
    BuiltinDef("rank", (TENSOR,), INT, (GUARD, COST), "number of dims", lambda t: t.rank,
            "type", _NUMERIC_ATTRS),
    BuiltinDef("dim", (TENSOR, INT_LITERAL), INT, (GUARD, COST),
            "i-th size (i < 0 counts from the end)", _dim, "type", _NUMERIC_ATTRS),
    BuiltinDef("numel", (TENSOR,), INT, (GUARD, COST), "number of elements",
            lambda t: t.numel, "type", _NUMERIC_ATTRS),
    BuiltinDef("bytes", (TENSOR,), INT, (COST,), "size in bytes",
            lambda t: t.numel * t.dtype.itemsize),
    BuiltinDef("shape", (TENSOR,), TUPLE, (GUARD,), "the sizes, as a tuple",
            lambda t: tuple(t.shape), "type", ("shape", "ints")),
    BuiltinDef("dtype", (TENSOR,), STR, (GUARD, COST), 'element type ("f32", "i64", ...)',
            lambda t: str(t.dtype), "type", ("dtype", "str")),
    BuiltinDef("layout", (TENSOR,), STR, (GUARD, COST), 'physical layout ("NHWC", ...)',
            lambda t: t.layout, "type", ("layout", "str")),
    BuiltinDef("device", (TENSOR,), STR, (GUARD, COST), 'device ("cpu", "cuda")',
            lambda t: t.device, "type", ("device", "str")),
    BuiltinDef("is_float", (TENSOR,), BOOL, (GUARD, COST), "floating-point dtype",
            lambda t: t.dtype.is_float, "type"),
    BuiltinDef("is_const", (TENSOR,), BOOL, (GUARD,), "known at compile time", analysis="class"),
    BuiltinDef("value", (TENSOR,), FLOAT, (GUARD,), "the value of a 0-d constant",
            analysis="class", fills=("float", "optfloat", "number")),
    BuiltinDef("has_target", (STR_LITERAL,), BOOL, (GUARD,), "the target is being compiled for"),
    # Calibration facts (`cuvil.Quantize`): what observers saw of a value over the
    # calibration batches; only values that were observed have them.
    BuiltinDef("calibrated", (TENSOR,), BOOL, (GUARD,), "observed during calibration",
               analysis="class"),
    BuiltinDef("absmax", (TENSOR,), FLOAT, (GUARD,), "largest |value| observed (clipped by "
               "the calibration method)", analysis="class", fills=("float", "number")),
    BuiltinDef("scale", (TENSOR,), FLOAT, (GUARD,), "its int8 scale from calibration",
               analysis="class", fills=("float", "number")),
    BuiltinDef("zero_point", (TENSOR,), INT, (GUARD,), "its int8 zero point from calibration",
               analysis="class", fills=("int", "number")),
    BuiltinDef("max", (NUMBER, NUMBER), NUMBER, (COST,), "the larger", max),
    BuiltinDef("min", (NUMBER, NUMBER), NUMBER, (COST,), "the smaller", min),
    BuiltinDef("roofline", (), FLOAT, (COST,), "this node's default cost, to scale or adjust"),
    BuiltinDef("flops", (), FLOAT, (COST,), "this node's arithmetic (the catalog's count)"),
    BuiltinDef("moved", (), FLOAT, (COST,), "bytes this node reads and writes"),
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
