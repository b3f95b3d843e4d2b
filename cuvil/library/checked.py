"""Checked rules: what `cuvil.library.load` returns and every later stage consumes.

Terms in a `CheckedRule` are normalised against the op catalog: each `Call` holds its tensor
arguments in `args` and *every* attribute in `kwargs`, in signature order, with the
catalog's defaults filled in; a number where a tensor is expected is a 0-d
`scalar(value=..., dtype=...)` call (`f32` for floats, `i64` for ints, `bool` for bools);
`_` stays a `Wildcard`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from cuvil.dsl.ast import CostDecl, Expr, Pos, Schedule, TargetDecl, Term

if TYPE_CHECKING:
    from cuvil.ops.registry import OpDef


@dataclass(frozen=True)
class CheckedRule:
    name: str
    lhs: Term
    rhs: Term
    guard: Expr | None
    ruleset: str
    description: str
    pos: Pos
    reverse: bool = False  # the right-to-left half of a `<=>` rule
    tolerance: Expr | None = None  # `approx`: the largest |lhs - rhs| the rule allows

    @property
    def where(self) -> str:
        return self.pos.where

    @property
    def label(self) -> str:
        """A unique, readable name: `add_comm` and `add_comm~rev` for its reverse half."""
        return f"{self.name}~rev" if self.reverse else self.name


@dataclass(frozen=True)
class RuleLibrary:
    rules: tuple[CheckedRule, ...] = ()
    ops: dict[str, OpDef] = field(default_factory=dict)  # composite ops from `op` items
    rulesets: dict[str, tuple[str, ...]] = field(default_factory=dict)  # in load order
    targets: dict[str, TargetDecl] = field(default_factory=dict)
    costs: dict[str, CostDecl] = field(default_factory=dict)
    schedule: Schedule | None = None
    files: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def without(self, disabled: tuple[str, ...] | list[str]) -> RuleLibrary:
        """The library minus the named rules and rulesets; a name also turns off the
        rulesets it prefixes (`fusion` turns off `fusion_linear`, `fusion_conv`, ...)."""
        off = set(disabled)

        def dropped(ruleset: str) -> bool:
            return any(ruleset == n or ruleset.startswith(n + "_") for n in off)

        names = {r.name for r in self.rules}
        unknown = {n for n in off if n not in names
                   and not any(rs == n or rs.startswith(n + "_") for rs in self.rulesets)}
        if unknown:
            from cuvil.errors import CuvilError

            raise CuvilError(f"cannot disable {', '.join(sorted(unknown))}: no such rule or "
                             f"ruleset (rulesets: {', '.join(self.rulesets)})")
        rules = tuple(r for r in self.rules if r.name not in off and not dropped(r.ruleset))
        kept = {r.name for r in rules}
        rulesets = {k: tuple(n for n in v if n in kept) for k, v in self.rulesets.items()
                    if not dropped(k)}
        return replace(self, rules=rules, rulesets=rulesets)

    def rule(self, name: str) -> CheckedRule:
        return next(r for r in self.rules if r.name == name)
