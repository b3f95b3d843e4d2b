"""`cuvil cache info|clear`: counts what a compile left, clears a part, one-line errors."""

from __future__ import annotations

import torch

import cuvil
from cuvil.cli import main


def test_info_counts_a_compile_and_clear_empties_graphs(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    cuvil.compile(torch.nn.ReLU(), (torch.randn(2, 3),))
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"cache: {tmp_path} (limit ")
    counts = {line.split()[0]: int(line.split()[1]) for line in out.splitlines()[1:5]}
    assert counts["graphs"] >= 1 and counts["kernels"] >= 1
    assert main(["cache", "clear", "--only", "graphs"]) == 0
    assert capsys.readouterr().out.startswith("cleared graphs: ")
    assert not list((tmp_path / "graphs").glob("*.cvg"))
    assert list((tmp_path / "kernels").glob("cuvil_*.py"))


def test_a_bad_limit_is_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CUVIL_CACHE_MAX_MB", "lots")
    assert main(["cache", "info"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("cuvil: error: CUVIL_CACHE_MAX_MB must be") and err.count("\n") == 1
