"""The `.cvr` abstract syntax tree: frozen dataclasses, one per grammar alias in `cvr.lark`.

Every node carries a `Pos` (`path:line:col`) so that each later stage (checker, egglog
encoder, verifier, provenance) can point at the source.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cuvil.dsl.pos import Pos as Pos  # its own module: reading sources needs no AST


# -- terms (rule sides and op bodies) ---------------------------------------------------------
@dataclass(frozen=True)
class Var:
    """A pattern variable; used twice in one pattern it means the same value."""

    name: str
    pos: Pos


@dataclass(frozen=True)
class Wildcard:
    """`_`: matches anything, binds nothing."""

    pos: Pos


@dataclass(frozen=True)
class Literal:
    """An int, float, string, bool, `None` or tuple of literals."""

    value: int | float | str | bool | tuple | None
    pos: Pos


@dataclass(frozen=True)
class Call:
    """`op(args..., key=value...)`; positional args are tensors then attributes in order."""

    op: str
    args: tuple[Term, ...]
    kwargs: tuple[tuple[str, Term], ...]
    pos: Pos
    # where each keyword of `kwargs` is written (parser output only; not part of equality)
    key_pos: tuple[Pos, ...] = field(default=(), compare=False, repr=False)


Term = Var | Wildcard | Literal | Call


# -- guard and cost expressions -----------------------------------------------------------------
@dataclass(frozen=True)
class BinOp:
    """`and or == != < <= > >= + - * / %`."""

    op: str
    left: Expr
    right: Expr
    pos: Pos


@dataclass(frozen=True)
class Not:
    operand: Expr
    pos: Pos


@dataclass(frozen=True)
class Neg:
    operand: Expr
    pos: Pos


@dataclass(frozen=True)
class Builtin:
    """`rank(x)`, `dim(x, -1)`, `has_target("cuda")`, `max(a, b)`, ...: never Python."""

    name: str
    args: tuple[Expr, ...]
    pos: Pos


@dataclass(frozen=True)
class TargetParam:
    """`target.gflops` inside a `cost` expression."""

    name: str
    pos: Pos


Expr = BinOp | Not | Neg | Builtin | TargetParam | Var | Literal


# -- top-level items --------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    name: str
    lhs: Term
    rhs: Term
    guard: Expr | None
    bidirectional: bool
    ruleset: str
    description: str
    pos: Pos
    tolerance: Expr | None = None  # `approx EXPR`: |lhs - rhs| may reach this (quantization)
    override: bool = False  # `override rule NAME`: replaces the rule NAME loaded before it

    def tolerance_pos(self) -> Pos:
        e = self.tolerance
        while isinstance(e, BinOp):
            e = e.left
        return getattr(e, "pos", self.pos)


@dataclass(frozen=True)
class OpDecl:
    """`op NAME(params) = BODY [kernel FAMILY]`: a composite op defined by what it computes,
    and the kernel family that computes it in one call ("": lowered as its parts)."""

    name: str
    params: tuple[str, ...]
    body: Term
    description: str
    pos: Pos
    kernel: str = ""
    kernel_pos: Pos | None = None  # where the family is named


@dataclass(frozen=True)
class RulesetDecl:
    name: str
    pos: Pos


@dataclass(frozen=True)
class TargetDecl:
    """`target NAME(key=number, ...)`: cost parameters of a compile target."""

    name: str
    params: tuple[tuple[str, float], ...]
    pos: Pos


@dataclass(frozen=True)
class CostDecl:
    """`cost OP(params) = EXPR`: the op's cost in microseconds."""

    op: str
    params: tuple[str, ...]
    expr: Expr
    pos: Pos


@dataclass(frozen=True)
class Saturate:
    rulesets: tuple[str, ...]
    pos: Pos


@dataclass(frozen=True)
class Repeat:
    times: int
    rulesets: tuple[str, ...]
    pos: Pos


@dataclass(frozen=True)
class Schedule:
    steps: tuple[Saturate | Repeat, ...]
    pos: Pos


@dataclass(frozen=True)
class Include:
    """`include "PATH"`: `cuvil.dsl.sources` reads PATH (or the stock library) first."""

    path: str
    pos: Pos


Item = Rule | OpDecl | RulesetDecl | TargetDecl | CostDecl | Schedule | Include


@dataclass(frozen=True)
class Module:
    """One parsed `.cvr` file."""

    path: str
    items: tuple[Item, ...]


def show(e: Expr) -> str:
    """A guard, cost or tolerance expression as `.cvr` text (for reports)."""
    match e:
        case Literal(value=str(v)):
            return f'"{v}"'
        case Literal(value=v):
            return str(v)
        case Var(name=n):
            return n
        case TargetParam(name=n):
            return f"target.{n}"
        case Builtin(name=n, args=args):
            return f"{n}({', '.join(show(a) for a in args)})"
        case Not(operand=x):
            return f"not {show(x)}"
        case Neg(operand=x):
            return f"-{show(x)}"
        case BinOp(op=op, left=a, right=b):
            return f"{_operand(a)} {op} {_operand(b)}"
    return str(e)


def _operand(e: Expr) -> str:
    return f"({show(e)})" if isinstance(e, BinOp) else show(e)
