"""Running a `.cvr` schedule under limits that always hold.

`saturate(a)` steps ruleset `a` until a step changes nothing; `repeat(n, a, b)` steps `a`
then `b`, n times (stopping early once a whole round changes nothing). Without a schedule
every ruleset repeats in load order until a round changes nothing. After every step the
iteration, e-node and wall-clock limits are checked (saturation may use 70% of the time
limit, and stops early when the next step would not fit, judging by the last one); the
first limit hit ends saturation and is the report's stop reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from cuvil.dsl import ast
from cuvil.egraph.session import Limits, Session, StepResult


class LimitReached(Exception):
    pass


@dataclass
class Saturation:
    steps: list[StepResult]
    stop_reason: str


def plan(library, limits: Limits) -> list[ast.Saturate | ast.Repeat]:
    if library.schedule is not None:
        return list(library.schedule.steps)
    names = tuple(library.rulesets)
    pos = ast.Pos("<default schedule>", 0, 0)
    return [ast.Repeat(limits.iterations, names, pos)] if names else []


SATURATION_SHARE = 0.7  # of the time limit; the rest is left for extraction


def saturate(session: Session, limits: Limits, start: float,
             on_step: Callable[[StepResult], None] | None = None) -> Saturation:
    """Run the library's schedule; `start` is when the time limit started counting."""
    steps: list[StepResult] = []

    def step(rulesets: tuple[str, ...]) -> bool:
        result = session.step(rulesets)
        steps.append(result)
        if on_step:
            on_step(result)
        _check(len(steps), result, time.perf_counter() - start, limits)
        return result.changed

    complete = True
    try:
        for item in plan(session.library, limits):
            complete &= _run_item(item, step)
    except LimitReached as e:
        return Saturation(steps, str(e))
    return Saturation(steps, "saturated" if complete else "schedule complete")


def _run_item(item, step: Callable[[tuple[str, ...]], bool]) -> bool:
    """Run one schedule item; True if it reached a fixpoint."""
    if isinstance(item, ast.Saturate):
        for _ in _forever():
            if not step(item.rulesets):
                return True
    for _ in range(item.times):
        changed = False
        for rs in item.rulesets:
            changed |= step((rs,))
        if not changed:
            return True
    return False


def _forever() -> Iterator[int]:
    n = 0
    while True:
        n += 1
        yield n


def _check(iterations: int, last: StepResult, elapsed: float, limits: Limits) -> None:
    if last.size > limits.nodes:
        raise LimitReached(f"node limit ({last.size} > {limits.nodes} e-nodes)")
    budget = SATURATION_SHARE * limits.time
    if elapsed + last.seconds > budget:  # the next step would likely overrun
        raise LimitReached(f"time limit ({elapsed:.2f} s of {limits.time} s used; "
                           "another iteration would not fit)")
    if iterations >= limits.iterations:
        raise LimitReached(f"iteration limit ({limits.iterations})")
