"""Incremental recompilation: a kernel is a module of its own, named by its text, so the
identical layers of a model compile once, two models that share a layer share its compiled
kernel, and a second process compiling the model with one layer changed compiles that
layer's kernel alone. Counted in modules and Numba index files written, never timed;
every result is compared with torch eager. The imported graphs are lowered as they are: the
optimizer, which stops at a time limit, would make the kernels depend on the machine's load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from torch import nn

import cuvil
from cuvil.runtime import compile_graph


class Stack(nn.Module):
    """`depth` layers of linear + relu, width 24; layer `scaled`'s output times 3."""

    def __init__(self, depth: int = 4, scaled: int | None = None):
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.ModuleList(nn.Linear(24, 24) for _ in range(depth))
        self.scaled = scaled

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = torch.relu(layer(x))
            if i == self.scaled:
                x = x * 3.0
        return x


def compiled(model: nn.Module, cache: Path | None = None):
    """The imported graph of `model`, compiled with the kernel cache in `cache`, checked
    against eager."""
    x = torch.randn(5, 24)
    fast = compile_graph(cuvil.from_torch(model, (x,)), cache_dir=cache)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-5)
    return fast


def modules(fast) -> set[str]:
    return {k.module for k in fast.report.kernels if k.jit}


def test_identical_layers_compile_once(tmp_path):
    deep, shallow = compiled(Stack(depth=4), tmp_path), compiled(Stack(depth=1), tmp_path)
    assert modules(deep) == modules(shallow)  # a matmul kernel, a bias + relu kernel
    assert len(deep.report.kernels) == len(modules(deep)) == 2
    assert all(len(k.nodes) >= 4 for k in deep.report.kernels)  # each serves four layers


def test_models_that_share_layers_share_their_kernel_modules(tmp_path):
    plain, changed = compiled(Stack(), tmp_path), compiled(Stack(scaled=2), tmp_path)
    assert modules(plain) < modules(changed) and len(modules(changed) - modules(plain)) == 1
    shared = [k for k in changed.report.kernels if k.module in modules(plain)]
    assert shared and all(k.cached for k in shared)  # compiled by the first model, not again


SCRIPT = """
import json, sys, torch
sys.path.insert(0, {tests!r})
from test_incremental import Stack, compiled
fast = compiled(Stack(scaled={scaled}))
print(json.dumps({{"entry": fast.report.module_path,
                  "kernels": [[k.module, k.cached] for k in fast.report.kernels if k.jit]}}))
"""


def run_compile(cache: Path, scaled: int | None) -> dict:
    env = {**os.environ, "CUVIL_CACHE_DIR": str(cache)}  # Cuvil's drivers' Numba cache too
    code = SCRIPT.format(tests=str(Path(__file__).parent), scaled=scaled)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def written(cache: Path) -> tuple[set[Path], set[Path]]:
    """The modules and Numba index files in the kernel cache."""
    kernels = cache / "kernels"
    return set(kernels.glob("cuvil_*.py")), set((kernels / "__pycache__").glob("*.nbi"))


def test_a_second_process_compiles_only_the_changed_layer(tmp_path):
    run_compile(tmp_path, None)
    py_before, nbi_before = written(tmp_path)
    second = run_compile(tmp_path, 2)
    py_after, nbi_after = written(tmp_path)
    new_kernels = py_after - py_before - {Path(second["entry"])}
    compiled_now = [Path(m) for m, cached in second["kernels"] if not cached]
    assert len(new_kernels) == 1 and compiled_now == list(new_kernels)
    assert len(nbi_after - nbi_before) == 1  # Numba's index of that kernel alone
    assert len(second["kernels"]) >= 2  # the unchanged layers' kernel came from disk
