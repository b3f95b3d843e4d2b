"""The author's fast commands (`cuvil --version`, `--help`, `cuvil check FILE`, `cuvil cache
info`) import neither torch, Numba, egglog nor sympy: each runs `cuvil.cli.main` in a fresh
process and reports which of them it loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HEAVY = ("torch", "numba", "egglog", "sympy")

PROBE = """
import json, sys
from cuvil.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
print("LOADED", json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


def run(code: str, tmp_path) -> str:
    env = {**os.environ, "CUVIL_CACHE_DIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300, check=True).stdout


def loaded(argv: list[str], tmp_path) -> list[str]:
    out = run(PROBE.format(argv=argv, heavy=HEAVY), tmp_path)
    line = next(x for x in out.splitlines() if x.startswith("LOADED "))
    return json.loads(line.removeprefix("LOADED "))


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["check", "--help"],
                                  ["cache", "info"]])
def test_the_command_imports_no_heavy_library(argv, tmp_path):
    assert loaded(argv, tmp_path) == []


def test_check_reads_a_snapshot_of_the_op_catalog(tmp_path):
    rules = tmp_path / "my.cvr"
    rules.write_text('include "stock"\nrule abs_abs: abs(abs(x)) => abs(x)\n')
    cache = tmp_path / "cache"
    loaded(["check", str(rules)], cache)  # the first check loads the catalog: a snapshot
    assert loaded(["check", str(rules)], cache) == []
    assert loaded(["check", "stock", str(tmp_path / "missing.cvr")], cache) == []


def test_the_package_still_compiles_on_first_use(tmp_path):
    code = "import sys, cuvil; assert 'torch' not in sys.modules; print(callable(cuvil.compile))"
    assert run(code, tmp_path).strip() == "True"
