"""`verify(rules)`: every rule checked on random instances of its left-hand side.

For each rule (each direction of a `<=>` rule on its own), instances are built until
`instances` of them satisfy the guard, or the attempt budget runs out. Shapes start small
and grow with the attempt number, so the first counterexample found is a small one; of
those found, the smallest is shrunk further (inputs rounded to integers if it still fails).
Everything is drawn from one `random.Random` per rule, seeded by `seed` and the rule's
label: a run is reproducible and one rule's result does not depend on the others.

Guards see every known target (`cpu`, `cuda` and those the rules declare) in most
instances and a random subset of them in the others, so a rule guarded by
`has_target("cuda")` is verified where it fires, and `not has_target(...)` is reachable.
"""

from __future__ import annotations

import contextlib
import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from cuvil.errors import CuvilError
from cuvil.ir.types import DEVICES
from cuvil.rules.library import CheckedRule, RuleLibrary
from cuvil.rules.verify.compare import (
    Mismatch,
    compare_types,
    compare_values,
    magnitude,
    tolerance,
)
from cuvil.rules.verify.evaluate import computed_attrs, fill_values, type_of, value_of
from cuvil.rules.verify.guards import Unknown, builtin_calls, compute, hints, holds
from cuvil.rules.verify.instances import Builder, Instance, new_instance
from cuvil.rules.verify.shapes import Invalid

VERIFIED, UNSOUND, UNVERIFIED = "verified", "UNSOUND", "unverified"
INSTANCES = 50
ATTEMPTS_PER_INSTANCE = 40  # the budget: attempts per instance wanted
SHOWN_ELEMENTS = 16  # inputs up to this size are printed in a counterexample


@dataclass
class Counterexample:
    instance: Instance
    mismatch: Mismatch

    def lines(self, show_targets: bool = False) -> list[str]:
        inst = self.instance
        out = []
        for name in sorted(inst.types):
            t, value = inst.types[name], inst.tensors[name]
            const = " (const)" if name in inst.consts else ""
            shown = f" = {_text(value)}" if value.numel() <= SHOWN_ELEMENTS else ""
            out.append(f"{name}: {t}{const}{shown}")
        out += [f"{name} = {value!r}" for name, value in sorted(inst.attrs.items())]
        if show_targets:
            out.append(f"targets: {', '.join(sorted(inst.targets))}")
        return [*out, self.mismatch.what]


def _text(t: torch.Tensor) -> str:
    values = t.tolist()
    if t.is_floating_point():
        return _rounded(values)
    return str(values)


def _rounded(v) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_rounded(x) for x in v) + "]"
    return f"{v:.4g}"


@dataclass
class RuleResult:
    rule: CheckedRule
    status: str
    instances: int = 0
    reason: str = ""
    counterexample: Counterexample | None = None

    def __str__(self) -> str:
        head = f"{self.rule.where}: {self.rule.label}: "
        if self.status == VERIFIED:
            return head + f"verified ({self.instances})"
        if self.status == UNVERIFIED:
            return head + f"unverified: {self.reason}"
        targets = any(b.name == "has_target" for b in builtin_calls(self.rule.guard))
        lines = self.counterexample.lines(targets) if self.counterexample else [self.reason]
        return "\n".join([head + "UNSOUND", *(f"    {line}" for line in lines)])


@dataclass
class VerifyReport:
    results: list[RuleResult] = field(default_factory=list)
    seed: int = 0

    def count(self, status: str) -> int:
        return sum(1 for r in self.results if r.status == status)

    @property
    def sound(self) -> bool:
        return not self.count(UNSOUND)

    def summary(self) -> str:
        return (f"{len(self.results)} rules: {self.count(VERIFIED)} verified, "
                f"{self.count(UNSOUND)} UNSOUND, {self.count(UNVERIFIED)} unverified "
                f"(seed {self.seed})")

    def __str__(self) -> str:
        return "\n".join([*(str(r) for r in self.results), self.summary()])


def verify(library: RuleLibrary, seed: int = 0, instances: int = INSTANCES,
           only: tuple[str, ...] = (),
           on_result: Callable[[RuleResult], None] | None = None) -> VerifyReport:
    """Verify every rule of `library` (or those named in `only`, by name or label)."""
    report = VerifyReport(seed=seed)
    for rule in library.rules:
        if only and rule.name not in only and rule.label not in only:
            continue
        result = verify_rule(rule, library, seed, instances)
        report.results.append(result)
        if on_result:
            on_result(result)
    return report


def verify_rule(rule: CheckedRule, library: RuleLibrary, seed: int = 0,
                instances: int = INSTANCES) -> RuleResult:
    with _small_tensors():
        return _verify_rule(rule, library, seed, instances)


@contextlib.contextmanager
def _small_tensors():
    """oneDNN spends ~7 ms setting up each new convolution shape; torch's own kernels take
    0.5 ms on these tiny instances (and compute the same reference values)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.backends.mkldnn.flags(enabled=False):
            yield


def _verify_rule(rule: CheckedRule, library: RuleLibrary, seed: int,
                 instances: int) -> RuleResult:
    rng = random.Random(f"{seed}:{rule.label}")
    computed = computed_attrs(rule.rhs)
    facts = hints(rule.guard, computed)
    targets = sorted(set(DEVICES) | set(library.targets))
    found, failures, guard_false, why_not = 0, [], 0, ""
    for attempt in range(ATTEMPTS_PER_INSTANCE * instances):
        if found >= instances or len(failures) >= 3:
            break
        builder = Builder(library.ops, facts, rng, max_dim=min(2 + attempt // 5, 10))
        try:
            inst = new_instance(builder, rule.lhs, _targets(rng, targets))
        except Invalid as e:
            why_not = str(e)
            continue
        except Exception as e:  # a generator that cannot handle this op: not the rule's fault
            why_not = f"{type(e).__name__}: {e}"
            continue
        if not applies(rule.guard, computed, inst):
            guard_false += 1
            continue
        fill_values(inst, rng)
        outcome = check(rule, inst, library)
        if outcome is SKIPPED:
            why_not = "the reference implementation rejected every instance"
            continue
        found += 1
        if outcome is not None:
            failures.append(outcome)
    if failures:
        smallest = min(failures, key=lambda c: c.instance.size())
        return RuleResult(rule, UNSOUND, found, counterexample=shrink(rule, library, smallest))
    if found >= instances:
        return RuleResult(rule, VERIFIED, found)
    budget = ATTEMPTS_PER_INSTANCE * instances
    if found:
        reason = f"only {found} of {instances} instances satisfy the guard in {budget} attempts"
    elif guard_false:
        reason = (f"the guard never held ({guard_false} valid instances of the left side "
                  f"in {budget} attempts)")
    else:
        reason = f"no valid instance of the left side in {budget} attempts ({why_not})"
    return RuleResult(rule, UNVERIFIED, found, reason)


SKIPPED = object()


def applies(guard, computed: list, inst: Instance) -> bool:
    """Whether the rule fires on `inst`: the guard holds and every attribute the right-hand
    side computes from the match is known."""
    if not holds(guard, inst):
        return False
    try:
        for attr in computed:
            compute(attr, inst)
    except Unknown:
        return False
    return True


def check(rule: CheckedRule, inst: Instance, library: RuleLibrary):
    """None if both sides agree on `inst`; a `Counterexample` if not; SKIPPED if the
    left side itself cannot be evaluated (torch rejects what the catalog's types allow)."""
    defs = library.ops
    seen: list[torch.Tensor] = []
    try:
        left_type = type_of(rule.lhs, inst, defs, rule.where)
        left = value_of(rule.lhs, inst, defs, seen)
    except Exception:
        return SKIPPED
    try:
        right_type = type_of(rule.rhs, inst, defs, rule.where)
    except CuvilError as e:
        return Counterexample(inst, Mismatch(f"the right side is not defined here: {e}"))
    mismatch = compare_types(left_type, right_type)
    if mismatch is None:
        right_seen: list[torch.Tensor] = []
        try:
            right = value_of(rule.rhs, inst, defs, right_seen)
        except Exception as e:
            return Counterexample(inst, Mismatch(f"the right side fails here: {e}"))
        scale = magnitude([*inst.tensors.values(), *seen])
        tol = tolerance([*inst.tensors.values(), *seen, *right_seen])
        mismatch = compare_values(left, right, tol, scale)
    return None if mismatch is None else Counterexample(inst, mismatch)


def shrink(rule: CheckedRule, library: RuleLibrary, cx: Counterexample) -> Counterexample:
    """Simpler inputs that still fail: the float inputs rounded to integers."""
    inst = cx.instance
    rounded = {k: torch.round(v) + 0.0 if v.is_floating_point() and k not in inst.scalars else v
               for k, v in inst.tensors.items()}
    if all(torch.equal(rounded[k], v) for k, v in inst.tensors.items()):
        return cx
    simpler = Instance(inst.types, inst.attrs, inst.consts, inst.scalars, inst.domains,
                       inst.targets, rounded)
    outcome = check(rule, simpler, library)
    return outcome if isinstance(outcome, Counterexample) else cx


def _targets(rng: random.Random, known: list[str]) -> frozenset[str]:
    """Every known target in most instances, a random non-empty subset in the others."""
    if rng.random() < 0.7:
        return frozenset(known)
    return frozenset(rng.sample(known, rng.randint(1, len(known))))


