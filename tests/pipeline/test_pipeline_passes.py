"""`cuvil.compile` is one list of passes: a cold compile enters import (itself export,
functionalize and convert), calibrate, place, optimize, lower and build once each, in that
order; an import-cache hit skips the import's own passes, a compile-cache hit the
optimizer's stages; a program-cache hit runs no pass at all. Each computes what torch
eager does."""

from __future__ import annotations

import torch
from torch import nn

import cuvil
from cuvil.frontend import IMPORT
from cuvil.ops.execute import run
from cuvil.pipeline import PASSES, PROGRAM
from cuvil.pipeline.caches import ImportCache, OptimizedCache, ProgramCache

STAGES = ["import", "calibrate", "place", "optimize", "lower", "build"]
IMPORT_PASSES = ["export", "functionalize", "convert"]
ALL_PASSES = STAGES[:1] + IMPORT_PASSES + STAGES[1:]  # a pass running passes comes first


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def eager(model, x):
    with torch.no_grad():
        return model(x)


def test_the_pass_list_is_in_order_and_caches_wrap_stages():
    assert [p.name for p in PASSES] == STAGES
    assert [p.name for p in IMPORT] == IMPORT_PASSES
    caches = {p.name: type(p.cache) for p in PASSES if p.cache is not None}
    assert caches == {"import": ImportCache, "optimize": OptimizedCache}
    assert all(p.cache is None for p in IMPORT)  # the import cache wraps all three
    assert isinstance(PROGRAM.cache, ProgramCache)


def test_passes_run_once_in_order_and_a_program_hit_runs_none(tmp_path, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    model, x = Net().eval(), torch.randn(4, 8)
    cold = cuvil.compile(model, (x,), threads=1)
    assert list(cold.compile_trace.passes) == ALL_PASSES
    assert {"saturate", "lower", "build", "program store"} <= set(cold.compile_trace.totals)
    torch.testing.assert_close(cold(x), eager(model, x), rtol=1e-4, atol=1e-4)

    other_threads = cuvil.compile(model, (x,), threads=2)  # another program, same graph
    stages = other_threads.compile_trace.totals
    assert list(other_threads.compile_trace.passes) == STAGES  # an import-cache hit
    assert other_threads.report.graph.import_report.cache.startswith("hit")
    assert "cache lookup" in stages and "saturate" not in stages and "import" not in stages
    torch.testing.assert_close(other_threads(x), eager(model, x), rtol=1e-4, atol=1e-4)

    warm = cuvil.compile(model, (x,), threads=1)
    assert warm.report.program_cache.startswith("hit")
    assert warm.compile_trace.passes == {} and list(warm.compile_trace.totals) == [
        "program cache"]
    torch.testing.assert_close(warm(x), eager(model, x), rtol=1e-4, atol=1e-4)


def test_optimize_runs_the_first_three_passes_without_a_cache():
    model, x = Net().eval(), torch.randn(4, 8)
    optimized = cuvil.optimize(model, (x,))
    assert optimized.report.cache == ""  # no compile-cache lookup
    torch.testing.assert_close(run(optimized, x), eager(model, x),
                               rtol=1e-4, atol=1e-4)
