"""docs/how-to/verify-rules.md stays true: each `$ cuvil rules ...` example prints what the
page shows."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from cuvil.cli import main

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "how-to" / "verify-rules.md"
EXAMPLES = re.findall(r"```\n\$ (cuvil rules [^\n]*)\n(.*?)```", PAGE.read_text(), re.S)


def test_the_page_has_both_examples():
    assert [cmd.split()[2] for cmd, _ in EXAMPLES] == ["verify", "coverage"]


@pytest.mark.parametrize(("command", "shown"), EXAMPLES, ids=[c.split()[2] for c, _ in EXAMPLES])
def test_each_example_prints_what_the_page_shows(command, shown, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code = main(shlex.split(command)[1:])
    out = capsys.readouterr().out
    assert out == shown
    assert code == (1 if "UNSOUND\n" in shown else 0)
