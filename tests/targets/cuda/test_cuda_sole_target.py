"""`target="cuda"`: the whole graph placed on the GPU before the optimizer, every kernel
run there (simulated GPU), results equal to torch eager; an op without a CUDA kernel
refused or run on the host (`fallback_policy`); and the targets without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import cuvil
from cuvil.targets.cuda.runtime import launch
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
    assert graph.report.placement_line().startswith(
        "placement (every node on cuda, the sole target's device): "), str(graph.report)
    assert not any(graph.report.rules[r].matches for r in graph.report.rules
                   if r.endswith("_on_cuda"))  # nothing left for the placement rules


class Sorted(nn.Module):
    """A product, then a sort (an op no CUDA kernel lowers: it runs through torch)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(torch.sort(self.fc(x), dim=-1).values)


def sorted_model():
    torch.manual_seed(0)
    return Sorted().eval(), torch.randn(2, 4)


@pytest.mark.parametrize("policy", [None, "error"])
def test_an_op_without_a_cuda_kernel_is_a_one_line_error(policy):
    model, x = sorted_model()
    with pytest.raises(cuvil.CuvilError) as caught:
        cuvil.compile(model, (x,), target="cuda", cache=False, fallback_policy=policy)
    message = str(caught.value)
    assert "\n" not in message and "torch_op aten.sort.default" in message
    assert f"{Path(__file__).name}:" in message  # the op's source line


def test_fallback_policy_cpu_runs_it_on_the_host_with_its_copies_reported():
    model, x = sorted_model()
    fast = cuvil.compile(model, (x,), target="cuda", cache=False, fallback_policy="cpu")
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x), atol=1e-5, rtol=1e-5)
    [fallback] = fast.report.fallbacks
    assert fallback.op == "torch_op aten.sort.default" and fallback.placed == "cuda"
    assert "copies in and out" in fallback.reason
    text = str(fast.report)
    assert "lowered for cuda (and the CPU: 1 node(s) without a kernel" in text, text
    assert "(1 input(s) copied to cuda, 1 result(s) copied back)" in text, text
    assert set(fast.report.placement.values()) == {"cuda"}


@pytest.fixture
def no_gpu(monkeypatch):
    """numba.cuda as it is on a machine without a GPU and without the simulator."""
    monkeypatch.setattr(launch, "simulated", lambda: False)
    monkeypatch.setattr(launch.cuda, "is_available", lambda: False)


def test_cuda_alone_without_a_gpu_is_a_one_line_error_naming_the_simulator(no_gpu):
    model, inputs = TINY["mlp"]()
    with pytest.raises(cuvil.CuvilError) as caught:
        cuvil.compile(model, as_tuple(inputs), target="cuda", cache=False)
    message = str(caught.value)
    assert "\n" not in message and "NUMBA_ENABLE_CUDASIM=1" in message
    assert message.startswith("target 'cuda': ")


def test_cuda_and_cpu_without_a_gpu_compile_for_the_cpu_with_one_warning(no_gpu):
    model, inputs = TINY["mlp"]()
    inputs = as_tuple(inputs)
    with pytest.warns(UserWarning, match="compiling for cpu alone") as caught:
        fast = cuvil.compile(model, inputs, target=["cuda", "cpu"], cache=False)
    assert len(caught) == 1
    assert fast.report.target == "cpu" and set(fast.report.placement.values()) == {"cpu"}
    with torch.no_grad():
        torch.testing.assert_close(fast(*inputs), model(*inputs), atol=1e-5, rtol=1e-5)
