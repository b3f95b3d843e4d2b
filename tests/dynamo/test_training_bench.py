"""tests/dynamo/test_training_bench.py: `bench/training.py` at a tiny size (the MLP at
batch 4, inductor skipped): the cuvil backend's first training step has eager's gradients
(and a float64 step's, to rounding), and its inference output matches `cuvil.compile`'s and
eager's (timings are printed, never asserted)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch


def test_the_training_bench_runs_the_mlp_and_matches_eager(capsys):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench import training

    torch._dynamo.reset()
    training.main(["--models", "mlp", "--zoo", "mlp", "--skip", "inductor", "--batch", "4",
                   "--seconds", "0.3", "--quick"])
    lines = capsys.readouterr().out.splitlines()
    rows = {tuple(line.split()[:2]): line.split() for line in lines
            if line.split()[:1] == ["mlp"]}
    assert set(rows) == {("mlp", "eager"), ("mlp", "cuvil"), ("mlp", "cuvil.compile"),
                         ("mlp", "backend")}
    grad_err, f64_err = map(float, rows["mlp", "cuvil"][-2:])  # the first step's gradients
    assert grad_err < 1e-4 and f64_err < 1e-4  # against eager's, against float64 eager's
    assert float(rows["mlp", "eager"][-1]) < 1e-4
    assert float(rows["mlp", "backend"][-1]) < 1e-4  # inference: max abs error to eager
    assert float(rows["mlp", "cuvil.compile"][-1]) < 1e-4
    torch._dynamo.reset()
