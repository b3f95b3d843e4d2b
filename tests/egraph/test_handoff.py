"""The optimizer's child forked ahead of its graph (`egraph.worker.prestart`,
`egraph.handoff.OptimizerAhead`): it prepares while the parent goes on, computes what the
parent sends, reports a failure as the parent's error, and is never left running (an
isolated child too, while the parent does other work); a compile
that exports uses it and gets the graph the classic child gives, a cache hit starts none."""

from __future__ import annotations

import functools
import multiprocessing
import time

import pytest
import torch

import cuvil
from cuvil.egraph import handoff, worker
from cuvil.zoo import get as zoo_get


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _square_after(seconds: float):
    time.sleep(seconds)  # "imports": the parent is not kept waiting for them
    return lambda data, post: data * data


def _broken():
    raise ValueError("rules do not load")


def test_the_child_prepares_while_the_parent_goes_on_then_computes_its_input():
    start = time.perf_counter()
    pending = worker.prestart(functools.partial(_square_after, 0.3))
    assert time.perf_counter() - start < 0.25
    pending.send(7)
    outcome = pending.collect(deadline=10)
    assert outcome.finished and outcome.payload == 49
    assert not pending.child.is_alive()


def test_a_child_that_fails_to_prepare_raises_its_error_in_the_parent():
    pending = worker.prestart(_broken)
    pending.send(1)
    with pytest.raises(ValueError, match="rules do not load"):
        pending.collect(deadline=10)


def _answer_after(seconds: float, post):
    time.sleep(seconds)
    return 42


def test_an_isolated_child_works_while_the_parent_does_its_own_work():
    children = []
    outcome = worker.run_isolated(functools.partial(_answer_after, 0.3), 10,
                                  lambda: children.extend(multiprocessing.active_children()))
    assert outcome.finished and outcome.payload == 42
    assert len(children) == 1  # the child was running during the parent's work


def test_a_failure_of_the_parents_work_ends_the_isolated_child():
    def broken():
        raise ValueError("store failed")

    with pytest.raises(ValueError, match="store failed"):
        worker.run_isolated(functools.partial(_answer_after, 5), 10, broken)
    assert not multiprocessing.active_children()


def test_an_unused_child_is_ended():
    with handoff.OptimizerAhead(None) as ahead:
        ahead.start()
        child = ahead.pending.child
        assert child.is_alive()
    assert not child.is_alive()


def _compile(model, inputs, monkeypatch, use_ahead: bool):
    started = []
    original = handoff.OptimizerAhead.start

    def start(self):
        started.append(self)
        if use_ahead:
            original(self)

    monkeypatch.setattr(handoff.OptimizerAhead, "start", start)
    return cuvil.compile(model, inputs), started


def test_a_compile_that_exports_optimizes_in_the_child_started_ahead(fresh_cache, monkeypatch):
    model, inputs = zoo_get("cnn", batch=2)
    ahead, started = _compile(model, inputs, monkeypatch, use_ahead=True)
    assert len(started) == 1 and started[0].pending is None  # taken, then ended
    assert "saturate" in ahead.compile_trace.totals  # the child's stages reach the parent
    classic, _ = _compile(model, inputs, monkeypatch, use_ahead=False)  # a hit: no export
    assert classic.report.optimizer.cache.startswith("hit")
    assert ahead.graph.ops() == classic.graph.ops()
    with torch.no_grad():
        torch.testing.assert_close(ahead(*inputs), model(*inputs), atol=1e-4, rtol=1e-4)


def test_a_cache_hit_starts_no_child(fresh_cache, monkeypatch):
    model, inputs = zoo_get("mlp", batch=2)
    cuvil.compile(model, inputs)
    compiled, started = _compile(model, inputs, monkeypatch, use_ahead=True)
    assert started == [] and compiled.report.optimizer.cache.startswith("hit")


def test_the_graph_optimized_ahead_matches_the_classic_child(fresh_cache, monkeypatch):
    model, inputs = zoo_get("mlp", batch=2)
    ahead, _ = _compile(model, inputs, monkeypatch, use_ahead=True)
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(fresh_cache) + "-other")
    classic, started = _compile(model, inputs, monkeypatch, use_ahead=False)
    assert started and started[0].pending is None  # asked, not started: the classic fork
    assert ahead.graph.ops() and [(n.op, n.type) for n in ahead.graph] == \
        [(n.op, n.type) for n in classic.graph]
    assert ahead.report.optimizer.cost_after == pytest.approx(classic.report.optimizer.cost_after)
