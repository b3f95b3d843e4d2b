"""`cuvil rules coverage`: per rule, its matches, whether it is in an extracted graph and the
models where it fired, checked against the optimizer's own reports; the percentage and
`--fail-under`; the probe models are real models."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import cuvil
from cuvil.cli import main, probes
from cuvil.cli.coverage import coverage, default_models, load_spec

RULES = str(Path(__file__).parent / "data" / "coverage.cvr")
MODELS = ["zoo:mlp", "zoo:cnn"]


@pytest.fixture(scope="module")
def report():
    return coverage(RULES, MODELS)


def test_counts_are_the_optimizer_reports_summed_over_models(report):
    reference = {spec: cuvil.optimize(*load_spec(spec), rules=RULES,
                                         verify=False).report.rules
                 for spec in MODELS}
    assert [r.label for r in report.rules] == ["matmul_add", "conv_nhwc", "exp_log"]
    for row in report.rules:
        stats = {spec: reference[spec].get(row.label) for spec in MODELS}
        assert row.matches == sum(s.matches for s in stats.values() if s)
        assert row.models == [spec for spec, s in stats.items() if s and s.matches]
        assert row.in_result == any(s.in_result for s in stats.values() if s)
    assert report.models == MODELS and not report.failed


def test_which_rules_fired_and_the_percentage(report):
    rows = {r.label: r for r in report.rules}
    assert rows["matmul_add"].models == MODELS and rows["matmul_add"].in_result
    assert rows["conv_nhwc"].models == ["zoo:cnn"]
    assert rows["exp_log"].matches == 0 and rows["exp_log"].models == []
    assert report.percent == pytest.approx(200 / 3)
    assert report.summary() == "2 of 3 rules fired (66.7%) on 2 models"
    assert str(report).splitlines()[0].split() == ["rule", "matches", "in", "result",
                                                   "fired", "on"]


def test_the_command_prints_the_report_and_exits_under_fail_under(capsys):
    code = main(["rules", "coverage", RULES, "--models", *MODELS, "--fail-under", "60"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "exp_log" in out and out.rstrip().endswith("2 of 3 rules fired (66.7%) on 2 models")
    assert "zoo:mlp: optimized" in err and "zoo:cnn: optimized" in err
    code = main(["rules", "coverage", RULES, "--models", *MODELS, "--fail-under", "70"])
    out, err = capsys.readouterr()
    assert code == 1 and out.rstrip().endswith("coverage 66.7% is under 70%")


def test_a_rule_path_after_the_models_is_a_rule_path(capsys):
    code = main(["rules", "coverage", "--models", "zoo:mlp", RULES, "--fail-under", "30"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert out.rstrip().endswith("1 of 3 rules fired (33.3%) on 1 models")


def test_a_model_that_fails_is_reported_and_fails_the_command(capsys):
    code = main(["rules", "coverage", RULES, "--models", "zoo:no_such_model"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "model zoo:no_such_model failed: no zoo model 'no_such_model'" in out
    assert "0 of 3 rules fired (0.0%) on 0 models; 1 models failed" in out


def test_the_default_corpus_is_the_zoo_and_the_probes():
    corpus = default_models()
    assert corpus == [f"zoo:{n}" for n in cuvil.zoo.MODELS] + [f"probe:{n}" for n in
                                                                probes.PROBES]


@pytest.mark.parametrize("name", sorted(probes.PROBES))
def test_every_probe_is_a_model_cuvil_runs_as_torch_does(name):
    model, inputs = probes.get(name)
    if isinstance(model, torch.nn.Module):
        graph = cuvil.from_torch(model, inputs)
        with torch.no_grad():
            expected = model(*inputs)
        got = cuvil.run(graph, *inputs)
        for e, g in zip(torch.utils._pytree.tree_leaves(expected),
                        torch.utils._pytree.tree_leaves(got), strict=True):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
    else:  # a Cuvil graph (forms torch never writes, or calibrated): well formed, and runs
        model.verify()
        out = model[model.outputs[0]].type
        got = cuvil.run(model, *inputs).shape
        assert len(got) == out.rank and all(
            g == d for g, d in zip(got, out.shape, strict=True) if isinstance(d, int))
