"""PyTorch's own OpInfo samples for every op the frontend maps into the catalog, run through
Cuvil and compared with torch eager: imported and run by the reference executor, and
compiled by `cuvil.compile` (default options, compile cache on).

One test per OpInfo name and mode (all its variants). A sample torch.export cannot export
or whose inputs Cuvil does not take is skipped with its reason; a wrong value or any error
but a one-line `CuvilError` fails the test. The pass/skip/rejected/fail counts per mode are
printed after the module's tests.
"""

from __future__ import annotations

import time

import opinfo_support
import pytest
import torch
from opinfo_support import (
    FAIL,
    MODES,
    OPINFO_NAMES,
    PASS,
    SKIP,
    TALLY,
    Case,
    OpSample,
    opinfos,
    run_case,
    run_cases,
)
from torch.utils import _pytree as pytree

# Open defects, (OpInfo name, mode) -> reason: each runs as a non-strict xfail.
OPEN: dict[tuple[str, str], str] = {}


@pytest.fixture(scope="module", autouse=True)
def summary(request):
    """After the module: the counts per mode, printed past pytest's capture (as the stock
    rules' coverage report is), so that `pytest -q` and CI logs show them."""
    yield
    lines = TALLY.lines()
    if lines:
        capture = request.config.pluginmanager.get_plugin("capturemanager")
        with capture.global_and_fixture_disabled():
            print("\nOpInfo samples (tests/ops/test_opinfo.py):\n" + "\n".join(lines), flush=True)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", OPINFO_NAMES)
def test_opinfo_samples_match_eager(name, mode, request):
    if (name, mode) in OPEN:
        request.applymarker(pytest.mark.xfail(reason=OPEN[name, mode], strict=False))
    ids = [i for i in opinfos() if i == name or i.startswith(name + ".")]
    assert ids, f"no OpInfo named {name!r} in this torch"
    outcomes = []
    for test_id in ids:
        start = time.perf_counter()
        cases = opinfo_support.cases(test_id)
        results = run_cases(cases, mode)
        TALLY.seconds[mode] += time.perf_counter() - start
        for case, outcome in zip(cases, results, strict=True):
            TALLY.add(mode, case.label, outcome)
            outcomes.append((case.label, outcome))
    failures = [f"{label}: {o.reason}" for label, o in outcomes if o.status == FAIL]
    assert not failures, "\n".join(failures)
    assert any(o.status == PASS for _, o in outcomes), f"no sample of {name} ran"


def _case(fn, *inputs: torch.Tensor, tolerance: dict | None = None) -> Case:
    flat, spec = pytree.tree_flatten((inputs[0], tuple(inputs[1:]), {}))
    module = OpSample(fn, spec, [opinfo_support.TENSOR] * len(flat), [])
    return Case(fn.__name__, module, inputs, tolerance or {})


def test_a_wrong_value_is_a_failure(monkeypatch):
    case = _case(torch.add, torch.ones(3), torch.ones(3))
    assert run_case(case, "reference").status == PASS
    monkeypatch.setattr(opinfo_support, "run_reference", lambda graph, *xs: xs[0])
    outcome = run_case(case, "reference")
    assert outcome.status == FAIL and "not close" in outcome.reason


def test_an_error_that_is_not_a_cuvil_error_is_a_failure(monkeypatch):
    def broken(graph, *xs):
        raise IndexError("tuple index out of range")

    monkeypatch.setattr(opinfo_support, "run_reference", broken)
    outcome = run_case(_case(torch.neg, torch.ones(3)), "reference")
    assert (outcome.status, outcome.reason) == (FAIL, "IndexError: tuple index out of range")


def test_what_cuvil_does_not_take_is_skipped_or_rejected():
    assert run_case(_case(torch.neg, torch.ones(3, dtype=torch.complex64)),
                    "reference").status == SKIP

    def data_dependent(x):
        return x + 1 if x.sum() > 0 else x - 1  # control flow torch.export cannot trace

    outcome = run_case(_case(data_dependent, torch.ones(5)), "reference")
    assert outcome.status == SKIP and outcome.reason.startswith("torch.export failed")
