"""Checks of terms (rule sides, op bodies) against op signatures, and of their variables.

A term is checked in a role: `lhs` (a pattern: binds variables, `_` allowed), `rhs` (builds:
every variable bound by the pattern), `both` (a side of a `<=>` rule: a pattern that must
also build, so no `_`) or `body` (an `op` body: variables are the op's parameters). Each
variable is a tensor or an attribute value, never both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cuvil.dsl import ast
from cuvil.dsl.builtins import COMPUTED
from cuvil.dsl.diagnostics import Reporter
from cuvil.dsl.normalize import bind_arguments, suggest
from cuvil.dsl.signatures import value_names

if TYPE_CHECKING:  # the catalog imports torch; `cuvil check` reads a snapshot of it
    from cuvil.ops.registry import AttrSpec, OpDef

LHS, RHS, BOTH, BODY = "lhs", "rhs", "both", "body"
BROKEN = object()  # an `op` whose definition has errors: uses of it are not reported again


@dataclass(frozen=True)
class VarInfo:
    """How a variable is used: a tensor, or an attribute value of kind `attr_kind`."""

    is_tensor: bool
    attr_kind: str
    pos: ast.Pos
    unknown: bool = False  # an argument of an unknown op: its kind cannot be told


    @property
    def what(self) -> str:
        return "a tensor" if self.is_tensor else "an attribute value"


class TermChecker:
    """Reports every problem of a term; `lookup(name)` is an OpDef, `BROKEN` or None."""

    def __init__(self, reporter: Reporter, lookup: Callable[[str], object],
                 op_names: Callable[[], list[str]]):
        self.reporter, self.lookup, self.op_names = reporter, lookup, op_names
        self.hit_broken = False  # set when a term uses an op whose definition has errors

    def check(self, term: ast.Term, role: str, env: dict[str, VarInfo],
              params: tuple[str, ...] = ()) -> None:
        """Check `term` in `role`; pattern roles add their variables to `env`."""
        self.role, self.env, self.params = role, env, params
        self.hit_broken = False
        self._tensor(term)

    def _tensor(self, term: ast.Term) -> None:
        match term:
            case ast.Var():
                self._use(term, VarInfo(True, "", term.pos))
            case ast.Wildcard():
                self._wildcard(term)
            case ast.Literal():
                if type(term.value) not in (bool, int, float):
                    self.reporter.error(term.pos, f"expected a tensor here, got "
                                                  f"{_describe(term.value)}")
            case ast.Call():
                self._call(term)

    def _wildcard(self, term: ast.Wildcard) -> None:
        if self.role == LHS:
            return
        where = {RHS: "on the right-hand side", BOTH: "in a '<=>' rule (both sides build)",
                 BODY: "in an op body"}[self.role]
        self.reporter.error(term.pos, f"'_' matches anything and binds nothing: it cannot "
                                      f"appear {where}")

    def _call(self, call: ast.Call) -> None:
        opdef = self.lookup(call.op)
        if opdef is BROKEN:
            self.hit_broken = True
            self._unknown_arguments(call)
            return
        if opdef is None:
            self.reporter.error(call.pos, f"unknown op '{call.op}'"
                                          f"{suggest(call.op, self.op_names())}")
            self._unknown_arguments(call)
            return
        assert opdef is not None
        bound = bind_arguments(opdef, call)
        for pos, message in bound.problems:
            self.reporter.error(pos, message)
        for arg in bound.tensors:
            self._tensor(arg)
        for spec in opdef.attrs:
            if spec.name in bound.attrs:
                self._attr(bound.attrs[spec.name], spec, opdef)
            elif spec.required and not bound.problems:
                self.reporter.error(call.pos, f"'{call.op}' needs attribute '{spec.name}'")

    def _unknown_arguments(self, call: ast.Call) -> None:
        """Bind the variables under an unknown op loosely, so that no error follows from it."""
        for arg in (*call.args, *(value for _, value in call.kwargs)):
            if isinstance(arg, ast.Call):
                self._call(arg)
            elif isinstance(arg, ast.Var) and self.role != RHS:
                self.env.setdefault(arg.name, VarInfo(True, "", arg.pos, unknown=True))

    def _attr(self, value: ast.Term, spec: AttrSpec, opdef: OpDef) -> None:
        match value:
            case ast.Var():
                self._use(value, VarInfo(False, spec.kind, value.pos))
            case ast.Wildcard():
                self._wildcard(value)
            case ast.Call() if self.role == RHS and value.op in COMPUTED:
                self._computed(value, spec, opdef)
            case ast.Call():
                hint = (" (a right-hand side may compute it: "
                        f"{', '.join(sorted(COMPUTED))})" if self.role == RHS else "")
                self.reporter.error(value.pos, f"attribute '{spec.name}' of '{opdef.name}' "
                                               f"takes a value, not an op call{hint}")
            case ast.Literal():
                problem = attr_problem(value.value, spec.kind)
                if problem:
                    self.reporter.error(value.pos, f"attribute '{spec.name}' of "
                                                   f"'{opdef.name}' {problem}")

    def _computed(self, call: ast.Call, spec: AttrSpec, opdef: OpDef) -> None:
        """`eps=value(e)`: a built-in over a tensor the left-hand side bound."""
        want = 2 if call.op == "dim" else 1
        if call.kwargs or len(call.args) != want or not isinstance(call.args[0], ast.Var):
            form = "dim(x, i)" if call.op == "dim" else f"{call.op}(x)"
            self.reporter.error(call.pos, f"a computed attribute is written {form}, "
                                          "x a tensor of the left-hand side")
            return
        if call.op == "dim" and not (isinstance(call.args[1], ast.Literal)
                                     and type(call.args[1].value) is int):
            self.reporter.error(call.args[1].pos, "dim's index must be an integer literal")
            return
        if spec.kind not in COMPUTED[call.op]:
            self.reporter.error(call.pos, f"attribute '{spec.name}' of '{opdef.name}' is "
                                          f"{_article(spec.kind)}; {call.op}(...) cannot "
                                          "give one")
            return
        self._use(call.args[0], VarInfo(True, "", call.args[0].pos))

    def _use(self, var: ast.Var, info: VarInfo) -> None:
        known = self.env.get(var.name)
        if self.role == RHS and known is None:
            self.reporter.error(var.pos, f"variable '{var.name}' is not bound by the "
                                         f"left-hand side{suggest(var.name, self.env)}")
            return
        if self.role == BODY and var.name not in self.params:
            self.reporter.error(var.pos, f"'{var.name}' is not a parameter of this op"
                                         f"{suggest(var.name, self.params)}")
            return
        if known is None:
            self.env[var.name] = info
        elif known.is_tensor != info.is_tensor and not known.unknown:
            self.reporter.error(var.pos, f"'{var.name}' is used as {info.what} here but as "
                                         f"{known.what} at {known.pos}")


def _article(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _describe(value) -> str:
    if value is None:
        return "None"
    if isinstance(value, str):
        return f"the string {value!r}"
    return f"the tuple {value!r}"


def attr_problem(value, kind: str) -> str | None:
    """Why a literal does not fit an attribute of `kind` (None when it fits)."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    is_ints = isinstance(value, tuple) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value)
    fits = {
        "int": is_int,
        "float": is_int or isinstance(value, float),
        "optfloat": value is None or is_int or isinstance(value, float),
        "number": is_int or isinstance(value, float),
        "str": isinstance(value, str),
        "bool": isinstance(value, bool),
        "ints": is_int or is_ints,
        "shape": is_ints,
    }
    choices = value_names()
    if kind in choices:
        if value in choices[kind]:
            return None
        return f"must be one of {', '.join(choices[kind])}, got {value!r}"
    if fits.get(kind, True):
        return None
    want = {"int": "an int", "float": "a number", "optfloat": "a number or None",
            "number": "a number", "str": "a string", "bool": "True or False",
            "ints": "an int or a tuple of ints", "shape": "a tuple of ints"}[kind]
    return f"must be {want}, got {value!r}"
