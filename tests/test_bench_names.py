"""A `bench/` script runs with `bench/` first on `sys.path`, so a script named as a package
the benchmarks import (`bench/onnx.py`) would stand in for it: `import onnx` inside
ONNX Runtime's exporter would find the script. No script may take such a name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_no_bench_script_shadows_an_installed_module():
    bench = str(BENCH)
    shadowing = []
    for script in sorted(BENCH.glob("*.py")):
        name = script.stem
        if name in sys.builtin_module_names or name in sys.stdlib_module_names:
            shadowing.append(name)
            continue
        spec = importlib.util.find_spec(name) if name not in sys.modules else sys.modules[name]
        origin = getattr(spec, "origin", None) or getattr(spec, "__file__", None)
        if spec is not None and origin and not str(origin).startswith(bench):
            shadowing.append(name)
    assert not shadowing, f"bench scripts named as installed modules: {shadowing}"
