"""`cuvil rules verify`: wrong rules are caught with a counterexample, sound ones verify,
an unsatisfiable guard is `unverified`, runs are reproducible, bad files are diagnosed."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuvil.cli import main
from cuvil.library import load
from cuvil.verify import UNSOUND, UNVERIFIED, VERIFIED, verify, verify_rule

TESTS = Path(__file__).resolve().parents[1]
UNSOUND_DIR = TESTS / "cvr" / "unsound"
SOUND = TESTS / "verify" / "data" / "sound.cvr"
REFERENCE = TESTS / "cvr" / "pass" / "reference.cvr"
UNSOUND_FILES = sorted(UNSOUND_DIR.glob("*.cvr"))


def cuvil(capsys, *argv):
    code = main(["rules", "verify", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_there_are_at_least_ten_deliberately_wrong_rules():
    assert len(UNSOUND_FILES) >= 10
    for path in UNSOUND_FILES:  # one rule per file, each saying what is wrong with it
        library = load(path)
        assert len(library.rules) == 1, path.name
        assert library.rules[0].description.startswith("WRONG:"), path.name


@pytest.mark.parametrize("path", UNSOUND_FILES, ids=lambda p: p.stem)
def test_every_wrong_rule_is_unsound_with_a_counterexample(path):
    library = load(path)
    result = verify_rule(library.rules[0], library)
    assert result.status == UNSOUND, str(result)
    lines = result.counterexample.lines()
    assert lines[-1].startswith(("max error", "the sides differ", "the right side"))
    assert any(":" in line for line in lines[:-1])  # the inputs, with their types


def test_the_command_reports_each_wrong_rule_and_exits_1(capsys):
    code, out, err = cuvil(capsys, UNSOUND_DIR)
    assert code == 1, err
    heads = [line for line in out.splitlines() if not line.startswith("    ")]
    assert len(heads) == len(UNSOUND_FILES) + 1
    for head in heads[:-1]:
        assert head.endswith(": UNSOUND") and "tests/cvr/unsound/" in head
    assert heads[-1].startswith(f"{len(UNSOUND_FILES)} rules: 0 verified, "
                                f"{len(UNSOUND_FILES)} UNSOUND")


def test_a_small_counterexample_shows_its_inputs_and_the_error():
    library = load(UNSOUND_DIR / "sub_swapped.cvr")
    text = str(verify_rule(library.rules[0], library))
    head, *body = text.splitlines()
    assert head == f"{UNSOUND_DIR}/sub_swapped.cvr:2: sub_swapped: UNSOUND"
    assert body[0].lstrip().startswith("x: f32[") and " = [" in body[0]
    assert body[1].lstrip().startswith("y: f32[")
    assert body[-1].lstrip().startswith("max error")


def test_sound_rules_over_many_ops_verify(capsys):
    code, out, err = cuvil(capsys, SOUND)
    assert code == 0, out + err
    results = out.splitlines()
    assert all(line.endswith(": verified (50)") for line in results[:-1]), out
    assert results[-1] == "22 rules: 22 verified, 0 UNSOUND, 0 unverified (seed 0)"


def test_the_reference_example_verifies():
    """Every rule of the reference example is sound, types included: its layout guards are
    what keep `transpose_twice` and `add_comm` sound. `matmul_on_cuda` verifies: guards see
    every known target."""
    report = verify(load(REFERENCE))
    assert [r.status for r in report.results] == [VERIFIED] * len(report.results), str(report)
    assert {r.rule.label for r in report.results} >= {"transpose_twice", "add_comm~rev",
                                                      "matmul_on_cuda"}


def test_layout_blind_rules_are_unsound_on_the_type():
    """Without the reference example's guards, the values still agree but the types do not:
    a transpose resets the layout tag to the default, and `add` takes its first operand's,
    so both rules differ in layout on an NHWC (or contiguous-tagged 4-d) value."""
    report = verify(load("rule transpose_twice: transpose(transpose(x, a, b), a, b) => x\n"
                         "rule add_comm: add(x, y) <=> add(y, x)\n"))
    unsound = {r.rule.label: r for r in report.results if r.status == UNSOUND}
    assert "transpose_twice" in unsound and unsound.keys() & {"add_comm", "add_comm~rev"}
    for result in unsound.values():
        assert result.counterexample.mismatch.what.startswith("the sides differ in type")


def test_an_unsatisfiable_guard_is_unverified_not_passed(capsys):
    text = ("rule never: relu(x) => x\n    where rank(x) == 2 and rank(x) == 3\n"
            "rule contradiction: relu(x) => x\n    where dim(x, 0) > 100 and numel(x) < 10\n")
    library = load(text)
    report = verify(library)
    assert [r.status for r in report.results] == [UNVERIFIED, UNVERIFIED]
    assert "the guard never held" in report.results[0].reason
    assert report.sound  # unverified is not unsound: the command exits 0


def test_a_left_side_with_no_valid_instance_is_unverified():
    library = load("rule bad: matmul(x, x) => x\n    where rank(x) == 2 and dim(x, 0) == 3"
                   " and dim(x, 1) == 4\n")
    result = verify(library).results[0]
    assert result.status == UNVERIFIED
    assert result.reason.startswith("no valid instance of the left side")


def test_runs_are_reproducible_per_seed_and_per_rule(capsys):
    few = ("--instances", "12")
    first = cuvil(capsys, UNSOUND_DIR, SOUND, "--seed", "7", *few)
    assert first == cuvil(capsys, UNSOUND_DIR, SOUND, "--seed", "7", *few)
    assert first[1].endswith("36 rules: 22 verified, 14 UNSOUND, 0 unverified (seed 7)\n")
    other = cuvil(capsys, UNSOUND_DIR, "--seed", "8", *few)[1]
    assert other.splitlines()[:-1] != first[1].splitlines()[:len(other.splitlines()) - 1]
    # a rule's result does not depend on the rules verified before it
    alone = cuvil(capsys, UNSOUND_DIR, SOUND, "--seed", "7", *few, "--rule", "wrong_reshape")
    block = alone[1].split("\n1 rules:")[0]
    assert "wrong_reshape: UNSOUND" in block and block in first[1]


def test_bad_rule_files_are_diagnosed_without_a_traceback(capsys, tmp_path):
    bad = tmp_path / "bad.cvr"
    bad.write_text("rule r: relu(x) => x\nrule r: relu(x) => x\n")
    code, out, err = cuvil(capsys, bad)
    assert code == 1 and out == ""
    assert "bad.cvr:2:6: error: duplicate rule 'r'" in err and "Traceback" not in err
    code, out, err = cuvil(capsys, REFERENCE, "--rule", "no_such_rule")
    assert code == 1 and err.startswith("cuvil: error: no rule named no_such_rule")
