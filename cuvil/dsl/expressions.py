"""Static types of guard (`where`) and `cost` expressions: a closed language, never Python.

Values are `int`, `float`, `bool`, `str` and `tuple` (a shape). Tensor variables are only
usable as built-in arguments (`rank(x)`); variables bound at an attribute position are
values of the attribute's kind (`any` when it may be an int or a tuple). A guard must be a
`bool`; a cost must be a number (microseconds), and in costs a comparison counts as 0 or 1.
"""

from __future__ import annotations

from cuvil.dsl import ast
from cuvil.dsl.builtins import (
    ANY,
    BOOL,
    BUILTINS,
    COST,
    FLOAT,
    GUARD,
    INT,
    INT_LITERAL,
    NONE,
    NUMBER,
    STR,
    STR_LITERAL,
    TENSOR,
    TUPLE,
    allowed,
)
from cuvil.dsl.diagnostics import Reporter
from cuvil.dsl.normalize import suggest

UNKNOWN = "unknown"  # a variable under an unknown op: already reported, accepted anywhere
GUARD_BUILTINS, COST_BUILTINS = allowed(GUARD), allowed(COST)

# The guard type of a variable bound at an attribute of each `AttrSpec.kind`.
ATTR_TYPES = {"int": INT, "float": FLOAT, "number": FLOAT, "str": STR, "bool": BOOL,
              "ints": TUPLE, "shape": TUPLE, "dtype": STR, "layout": STR, "device": STR,
              "any": ANY}

_NUMERIC = {INT, FLOAT, ANY}
_ORDER = {"<", "<=", ">", ">="}


def literal_type(value) -> str:
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return INT
    return {float: FLOAT, str: STR, tuple: TUPLE}.get(type(value), NONE)


def start_pos(expr) -> ast.Pos:
    """Where an expression starts (a binary operation's pos is its operator's)."""
    while isinstance(expr, ast.BinOp):
        expr = expr.left
    return expr.pos


class ExprTyper:
    """Types one guard or cost expression, reporting each problem once.

    `env` maps variable names to `TENSOR` or a value type; `in_cost` selects the cost rules
    (target parameters allowed, booleans count as numbers, no `has_target`).
    """

    def __init__(self, reporter: Reporter, env: dict[str, str], in_cost: bool = False,
                 target_params: set[str] | frozenset[str] = frozenset(), what: str = "guard"):
        self.reporter, self.env, self.in_cost = reporter, env, in_cost
        self.target_params, self.what = target_params, what

    def check(self, expr, want: str) -> None:
        """Report an error unless `expr` has type `want` (BOOL for guards, NUMBER for costs)."""
        got = self.type_of(expr)
        if got is None or got == ANY:
            return
        if want == BOOL and got != BOOL:
            self.reporter.error(start_pos(expr), f"a {self.what} must be a boolean, got {got}")
        elif want == NUMBER and got not in _NUMERIC:
            self.reporter.error(start_pos(expr), f"a {self.what} must be a number, got {got}")

    def type_of(self, expr) -> str | None:
        """The type of `expr`, or None after reporting an error inside it."""
        match expr:
            case ast.Literal():
                return literal_type(expr.value)
            case ast.Var():
                return self._var(expr)
            case ast.Wildcard():
                return self._fail(expr.pos, f"'_' binds nothing: it cannot be used in a "
                                            f"{self.what}")
            case ast.TargetParam():
                return self._target_param(expr)
            case ast.Builtin():
                return self._builtin(expr)
            case ast.Not():
                return self._not(expr)
            case ast.Neg():
                return self._neg(expr)
            case ast.BinOp():
                return self._binop(expr)
        return self._fail(start_pos(expr), f"unexpected {type(expr).__name__}")

    def _fail(self, pos: ast.Pos, message: str) -> None:
        self.reporter.error(pos, message)
        return None

    def _numeric(self, t: str | None) -> bool:
        return t in _NUMERIC or (self.in_cost and t == BOOL)

    def _var(self, var: ast.Var) -> str | None:
        kind = self.env.get(var.name)
        where = "a parameter of this cost" if self.in_cost else "bound by the left-hand side"
        if kind is None:
            return self._fail(var.pos, f"unbound variable '{var.name}' in {self.what} (not "
                                       f"{where}){suggest(var.name, self.env)}")
        if kind == UNKNOWN:
            return ANY
        if kind == TENSOR:
            return self._fail(var.pos, f"'{var.name}' is a tensor: use it through a built-in "
                                       f"such as rank({var.name}) or dim({var.name}, 0)")
        return kind

    def _target_param(self, ref: ast.TargetParam) -> str | None:
        if not self.in_cost:
            return self._fail(ref.pos, "target parameters (target.NAME) are only available "
                                       "in cost expressions")
        if ref.name not in self.target_params:
            known = ", ".join(sorted(self.target_params)) or "none"
            return self._fail(ref.pos, f"unknown target parameter 'target.{ref.name}' "
                                       f"(declared: {known})")
        return FLOAT

    def _builtin(self, call: ast.Builtin) -> str | None:
        allowed = COST_BUILTINS if self.in_cost else GUARD_BUILTINS
        if call.name not in allowed:
            if call.name in BUILTINS:
                home = "guards" if self.in_cost else "cost expressions"
                return self._fail(call.pos, f"{call.name}() is only available in {home}")
            return self._fail(call.pos, f"unknown built-in '{call.name}' in a {self.what}"
                                        f"{suggest(call.name, allowed)}")
        params, result = BUILTINS[call.name].params, BUILTINS[call.name].result
        if len(call.args) != len(params):
            return self._fail(call.pos, f"{call.name}() takes {len(params)} argument(s), got "
                                        f"{len(call.args)}")
        types = [self._argument(call.name, arg, kind)
                 for arg, kind in zip(call.args, params, strict=True)]
        if any(t is None for t in types):
            return None
        if result == NUMBER:
            return INT if all(t == INT for t in types) else FLOAT
        return result

    def _argument(self, name: str, arg, kind: str) -> str | None:
        if kind == TENSOR:
            if isinstance(arg, ast.Var) and self.env.get(arg.name) in (TENSOR, UNKNOWN):
                return TENSOR
            if isinstance(arg, ast.Var | ast.Wildcard) and getattr(arg, "name", "") not in self.env:
                return self.type_of(arg)
            return self._fail(start_pos(arg), f"{name}() takes a tensor variable")
        if kind in (INT_LITERAL, STR_LITERAL):
            want = int if kind == INT_LITERAL else str
            if isinstance(arg, ast.Literal) and type(arg.value) is want:
                return INT if want is int else STR
            return self._fail(start_pos(arg), f"{name}() needs {_article(kind)} here")
        got = self.type_of(arg)
        if got is None or got in (ANY, kind) or (kind == NUMBER and self._numeric(got)):
            return got
        return self._fail(start_pos(arg), f"{name}() needs {_article(kind)} here, got {got}")

    def _not(self, expr: ast.Not) -> str | None:
        got = self.type_of(expr.operand)
        if got not in (None, BOOL, ANY):
            return self._fail(expr.pos, f"'not' needs a boolean, got {got}")
        return None if got is None else BOOL

    def _neg(self, expr: ast.Neg) -> str | None:
        got = self.type_of(expr.operand)
        if got is not None and not self._numeric(got):
            return self._fail(expr.pos, f"'-' needs a number, got {got}")
        return None if got is None else (FLOAT if got == FLOAT else INT)

    def _binop(self, expr: ast.BinOp) -> str | None:
        left, right = self.type_of(expr.left), self.type_of(expr.right)
        if left is None or right is None:
            return None
        op, pair = expr.op, f"{left} and {right}"
        if op in ("and", "or"):
            if {left, right} <= {BOOL, ANY}:
                return BOOL
            return self._fail(expr.pos, f"'{op}' needs booleans on both sides, got {pair}")
        if op in ("==", "!="):
            if self._comparable(left, right):
                return BOOL
            return self._fail(expr.pos, f"cannot compare {left} with {right} using '{op}'")
        if not (self._numeric(left) and self._numeric(right)):
            return self._fail(expr.pos, f"'{op}' needs numbers on both sides, got {pair}")
        if op in _ORDER:
            return BOOL
        if op == "%" and not self.in_cost and FLOAT in (left, right):
            return self._fail(expr.pos, f"'%' needs integers in a guard, got {pair}")
        return FLOAT if op == "/" or FLOAT in (left, right) or ANY in (left, right) else INT

    def _comparable(self, left: str, right: str) -> bool:
        if ANY in (left, right) or left == right:
            return True
        return self._numeric(left) and self._numeric(right)


def _article(kind: str) -> str:
    return {INT: "an int", NUMBER: "a number", STR: "a string", INT_LITERAL: "an integer "
            "literal", STR_LITERAL: "a string literal"}.get(kind, kind)
