"""The `.cvr` docs say what the code does: the reference example in the reference is the
golden pass file, every golden fail case is listed there, and the tutorial's `cuvil check`
sessions print what the tutorial shows, and its optimize example (the stock library and
the tutorial's rules) prints the lines the tutorial quotes."""

from __future__ import annotations

import re
from pathlib import Path

from cuvil.cli import main
from cuvil.library import load

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = (ROOT / "docs" / "reference" / "cvr.md").read_text()
TUTORIAL = (ROOT / "docs" / "tutorials" / "first-rule.md").read_text()


def blocks(markdown: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", markdown, flags=re.S)


def test_reference_example_is_the_golden_file():
    example = (ROOT / "tests" / "cvr" / "pass" / "reference.cvr").read_text()
    assert example in blocks(REFERENCE, "")


def test_every_fail_case_is_listed_in_the_reference():
    names = {p.stem if p.suffix == ".cvr" else p.name
             for p in (ROOT / "tests" / "cvr" / "fail").iterdir()
             if p.suffix == ".cvr" or p.is_dir()}
    missing = sorted(n for n in names if f"`{n}`" not in REFERENCE and f"`{n}/`" not in REFERENCE)
    assert missing == []


def test_tutorial_sessions(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    sources, sessions = blocks(TUTORIAL, "cvr"), blocks(TUTORIAL, "console")
    assert len(sources) == len(sessions) == 3
    for source, session in zip(sources, sessions, strict=True):
        command, *expected = session.splitlines()
        assert command.startswith("$ cuvil check ") and command.endswith(" my_rules.cvr")
        (tmp_path / "my_rules.cvr").write_text(source)
        code = main(command.removeprefix("$ cuvil ").split())
        out, err = capsys.readouterr()
        assert (out + err).splitlines() == expected
        assert code == (1 if err else 0)


def test_tutorial_python_load(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_rules.cvr").write_text(blocks(TUTORIAL, "cvr")[0])
    snippet = blocks(TUTORIAL, "python")[0]
    printed = snippet.split("# ")[-1].strip()
    library = load("my_rules.cvr")
    assert str([(rule.name, rule.where) for rule in library.rules]) == printed


def test_tutorial_optimize_on_top_of_the_stock_library(tmp_path, monkeypatch, capsys):
    from cuvil.verify import verdicts

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))  # verified afresh
    monkeypatch.setattr(verdicts, "_IN_PROCESS", {})
    (tmp_path / "my_rules.cvr").write_text(blocks(TUTORIAL, "cvr")[0])
    snippet = blocks(TUTORIAL, "python")[1]
    assert 'rules=["stock", "my_rules.cvr"]' in snippet
    exec(compile(snippet, "first-rule.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    shown = [line.removeprefix("# ") for line in snippet.splitlines() if line.startswith("# ")]
    assert shown and all(line in printed for line in shown)
