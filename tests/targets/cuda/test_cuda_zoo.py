"""The zoo's MLP, CNN and transformer layer at tiny sizes compiled with `target="cuda"`
under the simulator: every kernel runs on cuda, nothing falls back, the results equal
eager, and the kernels launched (transfers aside) are no more than the CPU target's for
the same model (its lowering planned, not compiled: a cold CPU compile takes minutes)."""

from __future__ import annotations

import pytest
import torch

import cuvil
from cuvil.lower.compile import generate, prepare
from cuvil.zoo import cnn, mlp, transformer

MODELS = {
    "mlp": lambda: mlp.mlp(batch=2, width=16),
    "cnn": lambda: cnn.cnn(batch=1, size=8, channels=4),
    "transformer": lambda: transformer.transformer(batch=1, seq=4, d_model=16, heads=2,
                                                   ff=32),
}

def cpu_launches(model, inputs) -> int:
    """The kernel launches of the CPU target's lowering of `model`."""
    g, instances = prepare(cuvil.optimize(model, inputs, target="cpu"))
    program, _, _ = generate(g, instances, "cpu", 2, True, {}, True)
    return sum(1 for s in program.steps if s.kind == "kernel")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_model_runs_in_cuda_kernels(name):
    model, inputs = MODELS[name]()
    compiled = cuvil.compile(model, inputs, target="cuda", cache=False)
    report = compiled.report
    assert not report.fallbacks, report.fallbacks
    assert set(report.placement.values()) == {"cuda"}, report.placement
    with torch.no_grad():
        torch.testing.assert_close(compiled(*inputs), model(*inputs), atol=1e-4, rtol=1e-4)
    launches = [s for s in report.steps if s.kind == "kernel" and s.template != "transfer"]
    assert len(launches) <= cpu_launches(model, inputs), [s.template for s in launches]
