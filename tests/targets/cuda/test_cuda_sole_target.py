"""`target="cuda"`: the whole graph placed on the GPU before the optimizer, every kernel
run there (simulated GPU), results equal to torch eager."""

from __future__ import annotations

import pytest
import torch

import cuvil
from cuvil.zoo import cnn, mlp, transformer

TINY = {
    "mlp": lambda: mlp.mlp(batch=2, width=16),
    "cnn": lambda: cnn.cnn(batch=1, size=8, channels=4),
    "transformer": lambda: transformer.transformer(batch=1, seq=4, d_model=16, heads=2, ff=32),
}


def as_tuple(inputs):
    return inputs if isinstance(inputs, tuple) else (inputs,)


@pytest.mark.parametrize("name", sorted(TINY))
def test_a_zoo_model_runs_every_kernel_on_cuda(name):
    model, inputs = TINY[name]()
    inputs = as_tuple(inputs)
    fast = cuvil.compile(model, inputs, target="cuda", cache=False)
    assert set(fast.report.placement.values()) == {"cuda"}, str(fast.report)
    assert not fast.report.fallbacks, fast.report.fallbacks
    with torch.no_grad():
        torch.testing.assert_close(fast(*inputs), model(*inputs), atol=1e-5, rtol=1e-5)


def test_the_optimizer_sees_the_graph_on_cuda():
    model, inputs = TINY["mlp"]()
    graph = cuvil.optimize(model, as_tuple(inputs), target="cuda")
    computing = [n for n in graph if n.op not in ("input", "const", "scalar", "to_device")]
    assert computing and all(n.type.device == "cuda" for n in computing), str(graph)
    assert all(graph[o].type.device == "cpu" for o in graph.outputs)
