"""tests/dynamo/test_shared_results.py: an aten op with several results that runs through
torch inside a Cuvil graph (a convolution's input and weight gradients) runs once per call,
as in eager, and every result and gradient matches eager's; a training batch norm's are
Cuvil's kernels' (no batch norm op reaches torch)."""

from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch
from torch import nn

from cuvil.ir import torch_template
from cuvil.ir.torch_template import TorchCall
from cuvil.runtime.calling import fallback_groups

SHARED = ("convolution_backward",)

@pytest.fixture
def counted(monkeypatch) -> Counter:
    """Calls of each aten op that Cuvil's fallbacks make through `resolve_target`."""
    counts: Counter = Counter()
    resolve = torch_template.resolve_target

    def counting(target: str):
        op = resolve(target)

        def call(*args, **kwargs):
            counts[target.split(".")[1]] += 1
            return op(*args, **kwargs)

        return call

    monkeypatch.setattr(torch_template, "resolve_target", counting)
    return counts


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                         nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                         nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 10)).train()


def test_groups_are_the_results_of_one_call_on_the_same_inputs():
    conv = TorchCall("aten.convolution_backward.default", ("$0", "$1"), (), 0)
    other = TorchCall("aten.convolution_backward.default", ("$0", "$1"), (), 1)
    single = TorchCall("aten.relu.default", ("$0",), (), None)
    calls = [(conv, ("g", "x")), (single, ("g",)), (other, ("g", "x")),
             (other, ("h", "x")), (None, ("g",))]
    assert fallback_groups(calls) == [(0, 2), (), (0, 2), (), ()]


def test_each_multi_result_op_runs_once_per_step_with_eagers_gradients(counted):
    net, x = model(), torch.randn(4, 3, 8, 8)
    ours = copy.deepcopy(net)
    compiled = torch.compile(ours, backend="cuvil")
    labels = torch.randint(0, 10, (4,))
    for step in range(3):  # the first compiles; the later ones reuse the plans
        for m in (net, ours):
            m.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(net(x), labels).backward()
        counted.clear()
        nn.functional.cross_entropy(compiled(x), labels).backward()
        if step:  # two convolutions: one call each
            shared = {k: v for k, v in counted.items() if k in SHARED}
            assert shared == dict.fromkeys(SHARED, 2)
            assert not [op for op in counted if "batch_norm" in op], counted
        for (name, p), q in zip(ours.named_parameters(), net.parameters(), strict=True):
            error = ((p.grad - q.grad).norm() / q.grad.norm().clamp_min(1e-12)).item()
            assert error < 1e-4, (step, name, error)
        for (name, b), c in zip(ours.named_buffers(), net.buffers(), strict=True):
            torch.testing.assert_close(b, c, msg=name)

