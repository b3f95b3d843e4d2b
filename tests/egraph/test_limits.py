"""Runaway rules (commutativity and associativity both ways on a 1,000-node chain) are
stopped by every kind of limit; the caller always gets a valid, equivalent graph."""

from __future__ import annotations

import pytest
import torch

import cuvil

BLOWUP = """
ruleset blowup
rule add_comm: add(x, y) <=> add(y, x)
rule add_assoc: add(add(x, y), z) <=> add(x, add(y, z))
"""


@pytest.fixture(scope="module")
def chain(add_chain):
    return add_chain(1000)


def _equivalent(graph, result):
    result.verify()
    x = torch.randn(4, 8)
    torch.testing.assert_close(cuvil.run(result, x), cuvil.run(graph, x), rtol=1e-4,
                               atol=1e-3)  # reassociated float sums


@pytest.mark.parametrize("limits, reason", [
    ({"iterations": 2, "time": 600.0}, "iteration limit"),  # a slow machine must not
    ({"nodes": 3000, "time": 600.0}, "node limit"),        # hit the default time limit first
    ({"time": 1.0}, "time limit"),
])
def test_each_limit_stops_a_runaway(chain, limits, reason):
    out = cuvil.optimize(chain, rules=BLOWUP, limits=limits, verify=False)
    assert reason in out.report.stop_reason
    _equivalent(chain, out)


def test_match_limit_bans_explosive_rules(chain):
    out = cuvil.optimize(chain, rules=BLOWUP, limits={"match_limit": 50, "iterations": 4},
                         verify=False)
    banned = {r.label for r in out.report.rules.values() if r.banned}
    assert {"add_comm", "add_assoc"} <= banned
    assert out.report.growth()  # the report names the rules that grew the e-graph
    _equivalent(chain, out)


def test_a_step_overrunning_the_deadline_is_killed(chain):
    # 0.3 s cannot even hold the first iteration: the worker is killed at the deadline and
    # the input graph comes back, with the reason
    out = cuvil.optimize(chain, rules=BLOWUP, limits={"time": 0.3}, verify=False)
    assert "time limit" in out.report.stop_reason
    _equivalent(chain, out)


def test_unknown_limit_is_a_clear_error(chain):
    with pytest.raises(cuvil.CuvilError, match="unknown limit"):
        cuvil.optimize(chain, rules=BLOWUP, limits={"seconds": 1}, verify=False)
