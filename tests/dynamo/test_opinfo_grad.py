"""tests/dynamo/test_opinfo_grad.py: for every catalog op with a derivative, PyTorch's
OpInfo samples (float64 where the op's backward allows) through
`torch.compile(backend="cuvil")`: every input's gradient matches eager's within 1e-4
(relative), and a graph Cuvil refuses runs in eager with a warning, never silently and never
with a wrong gradient (`grad_support.py` says how). The pass/refused/skip/fail counts are
printed after the module's tests."""

from __future__ import annotations

from collections import Counter

import grad_support
import pytest
import torch
from grad_support import FAIL, PASS, Outcome, grad_ids, outcomes

TALLY: Counter = Counter()


@pytest.fixture(scope="module", autouse=True)
def summary(request):
    yield
    if TALLY:
        capture = request.config.pluginmanager.get_plugin("capturemanager")
        with capture.global_and_fixture_disabled():
            print("\nOpInfo gradients through the cuvil backend: "
                  + ", ".join(f"{n} {status}" for status, n in sorted(TALLY.items())),
                  flush=True)


@pytest.mark.parametrize("test_id", grad_ids())
def test_opinfo_gradients_match_eager(test_id):
    results = outcomes(test_id)
    TALLY.update(o.status for _, o in results)
    failures = [f"{label}: {o.reason}" for label, o in results if o.status == FAIL]
    assert not failures, "\n".join(failures)
    assert results, f"{test_id} has no samples"


def test_a_wrong_gradient_is_a_failure():
    want = (torch.ones(3), None)
    assert grad_support.mismatch((torch.ones(3), None), want) == ""
    assert "relative error" in grad_support.mismatch((torch.ones(3) * 1.001, None), want)
    assert "missing" in grad_support.mismatch((None, None), want)


def test_a_compiled_graph_with_a_wrong_result_fails_the_sample(monkeypatch):
    """Every result of the compiled graphs (the backward's gradients among them) off by
    0.1%: the sample fails."""
    from cuvil.dynamo import compiler

    right = compiler.Program.__call__

    def wrong(self, *args):
        return [r * 1.001 if isinstance(r, torch.Tensor) else r for r in right(self, *args)]

    monkeypatch.setattr(compiler.Program, "__call__", wrong)
    (outcome,) = grad_support.run_together([grad_support.grad_cases("sin")[0]])
    assert outcome.status == FAIL and "relative error" in outcome.reason


def test_a_refusal_without_a_warning_is_a_failure(monkeypatch):
    """A graph that runs in eager silently (the backend's warning removed) fails the sample,
    though its gradients are eager's own."""
    from cuvil.dynamo import compiler

    def silent(gm, what, error):
        compiler.COUNTS["eager"] += 1
        return gm

    monkeypatch.setattr(compiler, "eager", silent)
    monkeypatch.setattr(compiler, "Program", _refuse)
    (outcome,) = grad_support.run_together([grad_support.grad_cases("sin")[0]])
    assert outcome.status == FAIL and "without a warning" in outcome.reason
    monkeypatch.undo()
    monkeypatch.setattr(compiler, "Program", _refuse)
    (outcome,) = grad_support.run_together([grad_support.grad_cases("sin")[0]])
    assert outcome.status == "refused" and "runs in eager PyTorch" in outcome.reason
    assert isinstance(outcome, Outcome) and outcome.status != PASS


def _refuse(*args, **kwargs):
    from cuvil.errors import CuvilError

    raise CuvilError("refused for the test")
