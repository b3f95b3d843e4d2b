"""User rules are verified before a compile or optimize uses them (`cuvil/verify/gate.py`):
an unsound or unverifiable rule is refused, a sound one is verified once (its verdict is
kept by content key), `verify=False` opts out and the report says so."""

from __future__ import annotations

import pytest
import torch

import cuvil
from cuvil import verify as verifier
from cuvil.cli import main
from cuvil.library import load
from cuvil.verify import gate, verdicts

BAD = "rule bad: relu(x) => x\n"
GOOD = 'rule times_one: mul(x, 1.0) => x where rank(x) >= 1 and dtype(x) == "f32"\n'
NEVER = "rule never: relu(x) => x where rank(x) == 1 and rank(x) == 2\n"


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """An empty cache directory, and no verdict remembered in the process."""
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(verdicts, "_IN_PROCESS", {})
    return tmp_path / "cache"


@pytest.fixture
def calls(monkeypatch):
    """The rules the verifier is asked about, by label."""
    seen: list[str] = []
    real = verifier.verify_rule

    def counting(rule, library, *args, **kwargs):
        seen.append(rule.label)
        return real(rule, library, *args, **kwargs)

    monkeypatch.setattr(verifier, "verify_rule", counting)
    return seen


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval(), \
        (torch.randn(4, 8),)


def _rules_line(report) -> str:
    return next(line for line in str(report).splitlines() if line.startswith("rules: "))


def test_an_unsound_rule_is_refused_with_its_counterexample():
    model, inputs = _model()
    with pytest.raises(cuvil.CuvilError) as e:
        cuvil.compile(model, inputs, rules=BAD)
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith("<string>:1: rule bad is unsound: relu(x) => x differs at x: ")
    assert "max error" in message and "pass verify=False" in message


def test_a_sound_rule_is_verified_once(calls):
    model, inputs = _model()
    first = cuvil.compile(model, inputs, rules=[None, GOOD])
    assert _rules_line(first.report) == "rules: verified 1 user rule (0 cached)"
    second = cuvil.compile(model, inputs, rules=[None, GOOD])
    assert _rules_line(second.report) == "rules: verified 1 user rule (1 cached)"
    verdicts._IN_PROCESS.clear()  # another process: the verdict is read from the cache dir
    graph = cuvil.optimize(model, inputs, rules=GOOD)
    assert graph.report.rule_check == "verified 1 user rule (1 cached)"
    assert calls == ["times_one"]


def test_verify_false_uses_the_rule_unverified_and_says_so(calls):
    model, inputs = _model()
    fast = cuvil.compile(model, inputs, rules=BAD, verify=False)
    assert _rules_line(fast.report) == "rules: 1 user rule used unverified"
    assert not torch.allclose(fast(*inputs), model(*inputs))  # the rule is wrong
    assert calls == []
    with pytest.raises(cuvil.CuvilError, match="rule bad is unsound"):  # before any cache
        cuvil.compile(model, inputs, rules=BAD)


def test_a_rule_that_cannot_be_verified_is_refused():
    model, inputs = _model()
    with pytest.raises(cuvil.CuvilError, match=r"^<string>:1: rule never cannot be verified: "
                                               r"the guard never held .*verify=False"):
        cuvil.optimize(model, inputs, rules=NEVER)
    graph = cuvil.optimize(model, inputs, rules=NEVER, disable=["never"])
    assert graph.report.rule_check == ""  # disabled: not used, not verified


def test_the_stock_library_is_not_verified(calls, monkeypatch):
    model, inputs = _model()

    def refuse(*args, **kwargs):
        raise AssertionError("the gate ran for the stock library")

    with monkeypatch.context() as m:
        m.setattr(gate, "check_rules", refuse)
        cuvil.optimize(model, inputs)  # the default rules: the gate is not even entered
    graph = cuvil.optimize(model, inputs, rules=[None])  # named: its rules are the stock ones
    assert graph.report.rule_check == "" and calls == []


def test_a_verdict_key_is_the_rule_meaning_not_its_place():
    moved = load("\n\n" + GOOD.replace("times_one:", "times_one :"))
    here = load(GOOD)
    assert verdicts.rule_key(moved.rules[0], moved) == verdicts.rule_key(here.rules[0], here)
    fused = "op f(x) = relu(x)\nrule r: relu(x) => f(x)\n"
    changed = load(fused.replace("relu(x)\n", "sigmoid(x)\n", 1))
    assert verdicts.rule_key(load(fused).rule("r"), load(fused)) != \
        verdicts.rule_key(changed.rule("r"), changed)


def test_the_command_line_refuses_an_unsound_rule(tmp_path, capsys):
    path = tmp_path / "bad.cvr"
    path.write_text(BAD)
    assert main(["optimize", "zoo:mlp", "--rules", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"cuvil: error: {path}:1: rule bad is unsound") and "\n" not in err
    assert main(["optimize", "zoo:mlp", "--rules", str(path), "--no-verify"]) == 0
    assert "rules: 1 user rule used unverified" in capsys.readouterr().out


def test_stock_extended_verifies_only_the_user_rules(tmp_path, calls):
    mine = tmp_path / "my.cvr"
    mine.write_text(GOOD + "override rule relu_relu: relu(relu(x)) => relu(x)\n"
                           "    where is_float(x)\n")
    assert str(gate.check_rules("stock")) == "" and calls == []
    check = gate.check_rules(["stock", str(mine)])
    assert sorted(calls) == ["relu_relu", "times_one"]  # the override is a user rule
    assert (check.user, check.cached, check.verified) == (2, 0, True)
