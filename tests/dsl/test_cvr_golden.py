"""Golden tests of `cuvil check`: each case under tests/cvr/pass and tests/cvr/fail (a `.cvr`
file or a directory of them) is checked through `cuvil.cli.main`, and what it prints is
compared with the files stored beside it: `NAME.out` (stdout) and `NAME.err` (stderr).
Every fail case holds one defect. Regenerate the expected files after an intended change
of wording with `CUVIL_REGEN_GOLDEN=1 .venv/bin/pytest tests/dsl/test_cvr_golden.py`,
then read the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cuvil.cli import main

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "cvr"
REGENERATE = os.environ.get("CUVIL_REGEN_GOLDEN") == "1"


def cases(kind: str) -> list[str]:
    folder = CASES / kind
    return sorted(p.stem if p.suffix == ".cvr" else p.name for p in folder.iterdir()
                  if p.suffix == ".cvr" or p.is_dir())


def run_check(kind: str, name: str, capsys, monkeypatch) -> tuple[int, str, str]:
    monkeypatch.chdir(ROOT)
    folder = CASES / kind
    target = folder / name if (folder / name).is_dir() else folder / f"{name}.cvr"
    code = main(["check", target.relative_to(ROOT).as_posix()])
    out, err = capsys.readouterr()
    return code, out, err


def expect(path: Path, actual: str) -> None:
    if REGENERATE:
        if actual:
            path.write_text(actual)
        elif path.exists():
            path.unlink()
        return
    expected = path.read_text() if path.exists() else ""
    assert actual == expected, f"{path.name} differs (CUVIL_REGEN_GOLDEN=1 rewrites it)"


def test_there_are_enough_cases():
    assert len(cases("fail")) >= 25
    assert "reference" in cases("pass")


@pytest.mark.parametrize("name", cases("pass"))
def test_pass_case(name, capsys, monkeypatch):
    code, out, err = run_check("pass", name, capsys, monkeypatch)
    assert code == 0, err
    assert " rules, " in out or " rule, " in out
    expect(CASES / "pass" / f"{name}.out", out)
    expect(CASES / "pass" / f"{name}.err", err)


@pytest.mark.parametrize("name", cases("fail"))
def test_fail_case(name, capsys, monkeypatch):
    code, out, err = run_check("fail", name, capsys, monkeypatch)
    assert code == 1
    assert out == ""
    assert "Traceback" not in err
    first = err.splitlines()[0]
    assert f"tests/cvr/fail/{name}" in first and ": error: " in first
    expect(CASES / "fail" / f"{name}.err", err)
