"""Guards evaluated over a concrete instance, with the optimizer's semantics.

The optimizer compiles a guard to egglog query atoms (`cuvil/egraph/guards.py`); this is
the same meaning in Python, over the types and values of one verification instance, never
through `eval`. Negation is pushed down to the comparisons as the compiler does, and a
comparison whose value cannot be known (an out-of-range `dim`, `value` of a non-constant, a
division by zero) is false whichever way it is negated: unknown means no match.

`hints(guard)` reads the plain facts of a guard's top-level `and` (`rank(x) == 2`,
`dtype(x) == "f16"`, `is_const(c)`, `value(c) == 1.0`, `a == 0`...) so that the instance
builder makes them true up front instead of hoping that random instances satisfy them.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from cuvil.dsl import ast
from cuvil.dsl.builtins import BUILTINS, Known, Site
from cuvil.ir.types import TensorType
from cuvil.ops.quantized import affine_qparams

_COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
            ">": operator.gt, ">=": operator.ge}
_NEGATE = {"==": "!=", "!=": "==", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}


class Unknown(Exception):
    """A value the guard cannot know for this instance."""


class Facts(Protocol):
    """What a guard can see of an instance."""

    types: dict[str, TensorType]  # tensor variables
    attrs: dict[str, Any]  # attribute variables
    consts: set[str]  # tensor variables that are constants
    scalars: dict[str, float]  # values of 0-d constants
    targets: frozenset[str]


def holds(guard: ast.Expr | None, facts: Facts) -> bool:
    return guard is None or _condition(guard, facts, False)


def _condition(e: ast.Expr, facts: Facts, negate: bool) -> bool:
    match e:
        case ast.Not(operand=inner):
            return _condition(inner, facts, not negate)
        case ast.BinOp(op="and" | "or" as op, left=a, right=b):
            parts = (_condition(a, facts, negate), _condition(b, facts, negate))
            return all(parts) if (op == "and") != negate else any(parts)
        case ast.BinOp(op=op, left=a, right=b) if op in _COMPARE:
            try:
                left, right = _value(a, facts), _value(b, facts)
            except Unknown:
                return False
            return _COMPARE[_NEGATE[op] if negate else op](left, right)
        case ast.Builtin(name="has_target", args=(ast.Literal(value=str(target)),)):
            return _builtin("has_target", (ast.Literal(target, e.pos),), facts) != negate
    try:
        return bool(_value(e, facts)) != negate
    except Unknown:
        return False


def compute(e: ast.Expr, facts: Facts) -> Any:
    """The value of a guard expression or a computed attribute (`eps=value(e)`);
    `Unknown` where the optimizer would not know it either."""
    return _value(e, facts)


def _value(e: ast.Expr, facts: Facts) -> Any:
    match e:
        case ast.Literal(value=value):
            return value
        case ast.Var(name=name):
            return facts.attrs[name]
        case ast.Neg(operand=inner):
            return -_value(inner, facts)
        case ast.BinOp(op=op, left=a, right=b) if op in "+-*/%":
            return _arithmetic(op, _value(a, facts), _value(b, facts))
        case ast.Builtin(name=name, args=args):
            return _builtin(name, args, facts)
    raise Unknown(f"no value for {type(e).__name__}")


def _arithmetic(op: str, a: Any, b: Any) -> Any:
    if op in "/%" and b == 0:
        raise Unknown("division by zero")
    match op:
        case "+":
            return a + b
        case "-":
            return a - b
        case "*":
            return a * b
        case "/":
            return a / b
    return a - b * int(a / b)  # egglog's i64 % truncates, like Rust


def _builtin(name: str, args: tuple[ast.Expr, ...], facts: Facts) -> Any:
    """The built-in table's value over what the instance says of its arguments."""
    spec = BUILTINS.get(name)
    if spec is None:
        raise Unknown(f"unknown built-in {name}")
    values = [_known(a.name, facts) if isinstance(a, ast.Var) and a.name in facts.types
              else _value(a, facts) for a in args]
    value = spec.value(Site(targets=frozenset(facts.targets)), *values)
    if value is None:
        raise Unknown(f"{name}({', '.join(map(str, args))}) is not known here")
    return value


def _known(var: str, facts: Facts) -> Known:
    return Known(facts.types[var], const=var in facts.consts, scalar=facts.scalars.get(var),
                 observed=_observed(var, facts))


def _observed(var: str, facts: Facts) -> Mapping[str, Any] | None:
    """Calibration facts of an instance's input: as if calibrated on its own values (u8,
    affine), so that no value falls outside the calibrated range, and allowed f16 (the
    fp16 rules' `half_ok`); read when asked."""
    x = getattr(facts, "tensors", {}).get(var)
    if x is None or not x.is_floating_point() or not x.numel():
        return None
    return _Calibration(x)


class _Calibration(Mapping):
    """absmax, scale and zero_point of one tensor, computed on first use."""

    def __init__(self, x) -> None:
        self._x, self._facts = x, None

    def _all(self) -> dict[str, Any]:
        if self._facts is None:
            lo, hi = float(self._x.min()), float(self._x.max())
            scale, zero = affine_qparams(lo, hi)
            self._facts = {"absmax": max(abs(lo), abs(hi)), "scale": scale, "zero_point": zero,
                           "half_ok": True}
        return self._facts

    def __getitem__(self, name: str) -> Any:
        return self._all()[name]

    def __iter__(self):
        return iter(self._all())

    def __len__(self) -> int:
        return 4


# -- hints ------------------------------------------------------------------------------------
Fact = tuple[str, Any, Any]  # (variable, what, value): ("x", ("dim", 1), 8), ("a", "attr", 0)


@dataclass
class Hint:
    """What the guard says of one tensor variable, for one instance."""

    rank: int | None = None
    dims: dict[int, Any] = field(default_factory=dict)  # index -> size or ("multiple", m)
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    layout: str | None = None
    device: str | None = None
    is_float: bool = False
    const: bool | None = None
    value: float | None = None
    min_numel: int = 0


@dataclass
class Hints:
    """Facts of a guard: `firm` ones come from its top-level `and` and hold in every
    instance; `soft` ones come from under an `or` or `not` and are tried in about half."""

    firm: list[Fact] = field(default_factory=list)
    soft: list[Fact] = field(default_factory=list)

    def pick(self, rng) -> tuple[dict[str, Hint], dict[str, Any]]:
        """The facts of one instance: per tensor variable, and attribute values."""
        tensors: dict[str, Hint] = {}
        attrs: dict[str, Any] = {}
        chosen = [f for f in self.soft if rng.random() < 0.5]
        for var, what, value in [*chosen, *self.firm]:  # firm facts win
            if what == "attr":
                attrs[var] = value
                continue
            hint = tensors.setdefault(var, Hint())
            if isinstance(value, tuple) and value and value[0] == "at_least":
                value = value[1] + rng.choice((0, 0, 1))
            if isinstance(what, tuple):
                hint.dims[what[1]] = value
            else:
                setattr(hint, what, value)
        return tensors, attrs


def hints(guard: ast.Expr | None, computed: list[ast.Builtin] = ()) -> Hints:
    """The facts of `guard`; `computed` attributes of the right-hand side are facts too
    (`eps=value(e)` needs `e` to be a 0-d constant for the rule to apply)."""
    top = _conjuncts(guard)
    out = Hints()
    for atom in top:
        out.firm += _facts(atom)
    for call in [*builtin_calls(guard), *computed]:
        if call.name == "value" and isinstance(call.args[0], ast.Var):
            out.firm += [(call.args[0].name, "rank", 0), (call.args[0].name, "const", True)]
    for atom in _atoms(guard):
        if not any(atom is t for t in top):
            out.soft += _facts(atom)
    return out


def _conjuncts(e: ast.Expr | None) -> list[ast.Expr]:
    if isinstance(e, ast.BinOp) and e.op == "and":
        return _conjuncts(e.left) + _conjuncts(e.right)
    return [] if e is None else [e]


def _atoms(e: ast.Expr | None) -> list[ast.Expr]:
    """The comparisons and bare conditions of a guard, wherever they are."""
    if isinstance(e, ast.BinOp) and e.op in ("and", "or"):
        return _atoms(e.left) + _atoms(e.right)
    if isinstance(e, ast.Not):
        inner = e.operand
        return [e] if isinstance(inner, ast.Builtin) else _atoms(inner)
    return [] if e is None else [e]


def builtin_calls(e: Any) -> list[ast.Builtin]:
    """Every built-in call in a guard, outermost first."""
    if isinstance(e, ast.Builtin):
        return [e, *(b for a in e.args for b in builtin_calls(a))]
    children = {ast.BinOp: ("left", "right"), ast.Not: ("operand",), ast.Neg: ("operand",)}
    return [b for f in children.get(type(e), ()) for b in builtin_calls(getattr(e, f))]


_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "=="}


def _facts(atom: ast.Expr) -> list[Fact]:
    match atom:
        case ast.Builtin(name="is_float" | "is_const" as name, args=(ast.Var(name=x),)):
            return [(x, "is_float" if name == "is_float" else "const", True)]
        case ast.Not(operand=ast.Builtin(name="is_const", args=(ast.Var(name=x),))):
            return [(x, "const", False)]
        case ast.BinOp(op=op, left=ast.Literal() as lit, right=e) if op in _FLIP:
            return _compared(e, _FLIP[op], lit.value)
        case ast.BinOp(op=op, left=e, right=ast.Literal() as lit) if op in _FLIP:
            return _compared(e, op, lit.value)
    return []


def _compared(e: ast.Expr, op: str, value: Any) -> list[Fact]:
    """Facts that make `e OP value` true."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _equal(e, value) if op == "==" else []
    if op in ("<", "<="):  # only values and attributes are worth pushing down
        below = value - max(1, abs(value)) if op == "<" else value
        return _equal(e, below) if isinstance(e, ast.Var) or _is_value(e) else []
    least = value + 1 if op == ">" else value
    match e:
        case ast.BinOp(op="%", left=ast.Builtin(name="dim") as d, right=ast.Literal(value=int(m))):
            var, index = _dim_of(d)
            ok = op == "==" and value == 0 and var is not None and m > 0
            return [(var, ("dim", index), ("multiple", m))] if ok else []
        case ast.Builtin(name="numel", args=(ast.Var(name=x),)):
            return [(x, "min_numel", least)]
        case ast.Var(name=a):
            return [(a, "attr", least)]
        case ast.Builtin(name="rank" | "dim") if op != "==":
            return _equal(e, ("at_least", least))
    return _equal(e, least)


def _is_value(e: ast.Expr) -> bool:
    return isinstance(e, ast.Builtin) and e.name == "value"


def _equal(e: ast.Expr, value: Any) -> list[Fact]:
    match e:
        case ast.Var(name=a):
            return [(a, "attr", value)]
        case ast.Builtin(name="dim") if isinstance(value, int | tuple):
            var, index = _dim_of(e)
            return [] if var is None else [(var, ("dim", index), value)]
        case ast.Builtin(name="rank", args=(ast.Var(name=x),)) if isinstance(value, int | tuple):
            return [(x, "rank", value)]
        case ast.Builtin(name="shape", args=(ast.Var(name=x),)) if isinstance(value, tuple):
            return [(x, "shape", value)]
        case ast.Builtin(name="value", args=(ast.Var(name=x),)) if isinstance(value, int | float):
            return [(x, "value", float(value))]
        case ast.Builtin(name="dtype" | "layout" | "device" as name, args=(ast.Var(name=x),)):
            return [(x, name, value)] if isinstance(value, str) else []
    return []


def _dim_of(e: ast.Builtin) -> tuple[str | None, int | None]:
    if len(e.args) == 2 and isinstance(e.args[0], ast.Var):
        index = _literal_int(e.args[1])
        if index is not None:
            return e.args[0].name, index
    return None, None


def _literal_int(e: ast.Expr) -> int | None:
    if isinstance(e, ast.Literal) and isinstance(e.value, int):
        return e.value
    if isinstance(e, ast.Neg):
        inner = _literal_int(e.operand)
        return None if inner is None else -inner
    return None
