"""A session's steps: each rule's matches are looked for once, however many steps run, and
a rule refused at its match limit still comes back at a doubled one."""

from __future__ import annotations

from cuvil.egraph.session import Session
from cuvil.library import load
from cuvil.options import Limits

COMMUTE = """
ruleset swap
rule add_comm: add(x, y) => add(y, x)
"""


def _saturate(session: Session, rulesets=("swap",), steps: int = 20):
    results = []
    for _ in range(steps):
        results.append(session.step(rulesets))
        if not results[-1].changed:
            return results
    raise AssertionError(f"no fixpoint in {steps} steps")


def test_a_step_after_the_fixpoint_finds_no_match(add_chain):
    session = Session(add_chain(3), load(COMMUTE), ("cpu",), Limits())
    results = _saturate(session)
    applied = sum(r.matches.get("add_comm", 0) for r in results)
    assert applied == 6  # 3 adds, then their 3 swapped copies
    again = session.step(("swap",))
    # every match is applied already: the query looks only at what is new since
    assert not again.changed and not again.found.get("add_comm") and not again.matches
    assert again.size == results[-1].size


def test_a_rule_refused_at_its_limit_comes_back_at_a_doubled_one(add_chain):
    session = Session(add_chain(8), load(COMMUTE), ("cpu",), Limits(match_limit=4))
    first = session.step(("swap",))
    assert first.banned == ["add_comm"] and not first.matches
    results = _saturate(session, steps=40)
    applied = sum(r.matches.get("add_comm", 0) for r in results)
    assert applied == 16  # 8 adds, then their 8 swapped copies: each match once
    assert session.backoff["add_comm"].limit > 4
    lets = [c for c in session.program if c.startswith("(let-scheduler")]
    assert len(lets) == len(set(lets)) == session.backoff["add_comm"].times + 1
