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
from cuvil.ir.devices import known_devices
from cuvil.library.checked import CheckedRule, RuleLibrary
from cuvil.ops.draw import Invalid
from cuvil.verify.compare import (
    Mismatch,
    compare_types,
    compare_values,
    magnitude,
    tolerance,
)
from cuvil.verify.evaluate import computed_attrs, fill_values, type_of, value_of
from cuvil.verify.guards import Unknown, builtin_calls, compute, hints, holds
from cuvil.verify.instances import Builder, Instance, new_instance

VERIFIED, UNSOUND, UNVERIFIED = "verified", "UNSOUND", "unverified"
INSTANCES = 50
ATTEMPTS_PER_INSTANCE = 40  # the budget: attempts per instance wanted
SHOWN_ELEMENTS = 16  # inputs up to this size are printed in a counterexample
SHRINK_ATTEMPTS = 60  # attempts per tiny size when looking for a smaller counterexample


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
    trials = _Trials(rule, library, seed)
    budget = ATTEMPTS_PER_INSTANCE * instances
    found, failures = 0, []
    for attempt in range(budget):
        if found >= instances or len(failures) >= 3:
            break
        outcome = trials.run(max_dim=min(2 + attempt // 5, 10))
        if outcome is NO_INSTANCE or outcome is SKIPPED:
            continue
        found += 1
        if outcome is not None:
            failures.append(outcome)
    if failures:
        smallest = shrink(rule, library, trials.smallest(failures))
        return RuleResult(rule, UNSOUND, found, counterexample=smallest)
    if found >= instances:
        return RuleResult(rule, VERIFIED, found)
    if found:
        reason = f"only {found} of {instances} instances satisfy the guard in {budget} attempts"
    elif trials.guard_false:
        reason = (f"the guard never held ({trials.guard_false} valid instances of the left "
                  f"side in {budget} attempts)")
    else:
        reason = f"no valid instance of the left side in {budget} attempts ({trials.why_not})"
    return RuleResult(rule, UNVERIFIED, found, reason)


class _Trials:
    """Random instances of one rule's left-hand side, each checked against the right."""

    def __init__(self, rule: CheckedRule, library: RuleLibrary, seed: int):
        self.rule, self.library = rule, library
        self.rng = random.Random(f"{seed}:{rule.label}")
        self.computed = computed_attrs(rule.rhs)
        self.facts = hints(rule.guard, self.computed)
        self.targets = sorted(known_devices() | set(library.targets))
        self.guard_false, self.why_not = 0, ""

    def run(self, max_dim: int):
        """NO_INSTANCE, SKIPPED, None (both sides agree) or a `Counterexample`."""
        builder = Builder(self.library.ops, self.facts, self.rng, max_dim)
        try:
            inst = new_instance(builder, self.rule.lhs, _targets(self.rng, self.targets))
        except Invalid as e:
            self.why_not = str(e)
            return NO_INSTANCE
        except Exception as e:  # a generator that cannot handle this op: not the rule's fault
            self.why_not = f"{type(e).__name__}: {e}"
            return NO_INSTANCE
        fill_values(inst, self.rng)  # before the guard: calibration facts read the values
        if not applies(self.rule.guard, self.computed, inst):
            self.guard_false += 1
            return NO_INSTANCE
        outcome = check(self.rule, inst, self.library)
        if outcome is SKIPPED:
            self.why_not = "the reference implementation rejected every instance"
        return outcome

    def smallest(self, failures: list[Counterexample]) -> Counterexample:
        """The smallest counterexample: of those found, or of more drawn with tiny dims."""
        for max_dim in (1, 2, 3):
            more = [c for _ in range(SHRINK_ATTEMPTS)
                    if isinstance(c := self.run(max_dim), Counterexample)]
            if more:
                failures = failures + more
                break
        return min(failures, key=lambda c: c.instance.size())


NO_INSTANCE = object()
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
        try:
            right = value_of(rule.rhs, inst, defs)
        except Exception as e:
            return Counterexample(inst, Mismatch(f"the right side fails here: {e}"))
        scale = magnitude([*inst.tensors.values(), *seen])
        tol = tolerance([*inst.tensors.values(), *seen])  # the left side's own precision
        if rule.tolerance is not None:  # `approx`: the error the rule declares, on top
            try:
                tol = (tol[0], tol[1] + float(compute(rule.tolerance, inst)) / scale)
            except Unknown:
                return Counterexample(inst, Mismatch("the rule's tolerance is unknown here"))
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


