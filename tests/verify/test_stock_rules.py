"""The stock library (`rules/`): every rule verified and fired on the corpus (the zoo and
the probe models). One test per rule and check, so a failure names the rule; the coverage
report is printed in the test output. Skipped while `rules/` holds no `.cvr` file."""

from __future__ import annotations

import pytest

from cuvil.library import load
from cuvil.library.loader import stock_rules_dir

STOCK_FILES = sorted(stock_rules_dir().rglob("*.cvr"))
pytestmark = pytest.mark.skipif(not STOCK_FILES, reason="rules/ holds no .cvr file yet")


def _labels() -> list[str]:
    try:
        return [r.label for r in load(None).rules] if STOCK_FILES else []
    except Exception:  # reported by test_the_stock_library_loads
        return []


LABELS = _labels()


def _show(request, text: str) -> None:
    """Print in the test output (CI logs show it), past pytest's capture."""
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print("\n" + text, flush=True)


@pytest.fixture(scope="module")
def verified(request):
    from cuvil.verify import verify

    report = verify(load(None))
    _show(request, "cuvil rules verify rules/: " + report.summary())
    return {r.rule.label: r for r in report.results}


@pytest.fixture(scope="module")
def covered(request):
    from cuvil.cli.coverage import coverage

    report = coverage(None)
    _show(request, "cuvil rules coverage rules/:\n" + str(report))
    return report


def test_the_stock_library_loads():
    library = load(None)
    assert library.rules and not library.warnings


@pytest.mark.parametrize("label", LABELS)
def test_stock_rule_is_verified(verified, label):
    result = verified[label]
    assert result.status == "verified", str(result)


@pytest.mark.parametrize("label", LABELS)
def test_stock_rule_fires_on_the_corpus(covered, label):
    row = next(r for r in covered.rules if r.label == label)
    assert row.fired, f"{label} ({row.where}) fired on no model of the corpus"


def test_the_whole_corpus_runs_and_every_rule_fires(covered):
    assert not covered.failed, covered.failed
    assert covered.percent == 100.0, covered.summary()
