"""A second process compiling the same graph loads the kernels from the on-disk cache
instead of compiling them (checked through the report, not by timing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cuvil.paths import cache_dir
from cuvil.runtime.module_cache import load_module, module_key

SCRIPT = """
import json, sys, torch
sys.path.insert(0, {tests!r})
from runtime_support import mlp_graph
from cuvil.runtime import compile_graph
c = compile_graph(mlp_graph())
x = torch.ones(2, 16)
print(json.dumps({{"cached": [k.cached for k in c.report.kernels], "hit": c.report.cache_hit,
                  "path": c.report.module_path, "y": c(x)[0].tolist()}}))
"""


def run_compile(cache: Path) -> dict:
    env = {**os.environ, "CUVIL_CACHE_DIR": str(cache)}
    code = SCRIPT.format(tests=str(Path(__file__).parent))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_loads_compiled_kernels(tmp_path):
    first, second = run_compile(tmp_path), run_compile(tmp_path)
    assert not any(first["cached"]) and not first["hit"]
    assert all(second["cached"]) and second["hit"]
    assert first["y"] == second["y"]
    assert Path(first["path"]).parent == tmp_path / "kernels"


def test_cache_dir_setting(monkeypatch, tmp_path):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "a"))
    assert cache_dir() == tmp_path / "a"
    monkeypatch.delenv("CUVIL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "cuvil"
    assert cache_dir(tmp_path / "b") == tmp_path / "b"


def test_modules_are_named_by_their_text(tmp_path):
    text = "VALUE = 42\n"
    module, path = load_module(text, tmp_path)
    assert module.VALUE == 42 and path.name == f"cuvil_{module_key(text)}.py"
    assert path.read_text() == text
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
