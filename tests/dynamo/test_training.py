"""tests/dynamo/test_training.py: training through AOTAutograd with Cuvil compiling the
forward and backward graphs: every parameter's gradient and a ten-step loss curve match
eager's; batch norm in train mode uses the batch's statistics and updates its running
ones."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from cuvil.dynamo import COUNTS, compile_graph


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(),
                         nn.Linear(32, 10))


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                         nn.Flatten(), nn.Linear(8 * 4 * 4, 10))


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-12)).item()


@pytest.mark.parametrize("make, shape", [(mlp, (8, 16)), (cnn, (4, 3, 8, 8))],
                         ids=["mlp", "cnn"])
def test_every_gradient_matches_eager(make, shape):
    torch.manual_seed(0)
    model = make().train()
    reference = copy.deepcopy(model)
    x, target = torch.randn(shape), torch.randint(0, 10, (shape[0],))
    before = COUNTS.copy()
    loss = nn.functional.cross_entropy(torch.compile(model, backend="cuvil")(x), target)
    loss.backward()
    expected = nn.functional.cross_entropy(reference(x), target)
    expected.backward()
    assert COUNTS["compiles"] - before["compiles"] == 2  # the forward and the backward
    assert COUNTS["eager"] == before["eager"]
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        assert relative(p.grad, q.grad) < 1e-4, name
    for (name, b), c in zip(model.named_buffers(), reference.buffers(), strict=True):
        torch.testing.assert_close(b, c, msg=name)  # the running statistics


def test_ten_sgd_steps_follow_eager_loss_curve():
    torch.manual_seed(0)
    model = mlp()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="cuvil")
    x, target = torch.randn(32, 16), torch.randint(0, 10, (32,))
    curves = []
    for net, m in ((compiled, model), (reference, reference)):
        optimizer = torch.optim.SGD(m.parameters(), lr=0.1)
        curve = []
        for _ in range(10):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(net(x), target)
            loss.backward()
            optimizer.step()
            curve.append(loss.item())
        curves.append(curve)
    got, want = curves
    assert want[-1] < want[0]
    for step, (a, b) in enumerate(zip(got, want, strict=True)):
        assert abs(a - b) <= 1e-4 * abs(b), step


def test_compile_graph_is_a_forward_and_backward_compiler_for_aot_autograd():
    from torch._dynamo.backends.common import aot_autograd

    torch.manual_seed(0)
    model = mlp()
    reference = copy.deepcopy(model)
    backend = aot_autograd(fw_compiler=compile_graph, bw_compiler=compile_graph)
    x = torch.randn(8, 16)
    before = COUNTS.copy()
    torch.compile(model, backend=backend)(x).square().mean().backward()
    reference(x).square().mean().backward()
    assert COUNTS["compiles"] - before["compiles"] == 2
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        assert relative(p.grad, q.grad) < 1e-4, name


def test_dynamic_training_serves_three_batch_sizes_with_one_forward_and_one_backward():
    torch.manual_seed(0)
    model = mlp()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="cuvil", dynamic=True)
    before = COUNTS.copy()
    for batch in (4, 6, 9):
        x = torch.randn(batch, 16)
        model.zero_grad()
        reference.zero_grad()
        compiled(x).square().mean().backward()
        reference(x).square().mean().backward()
        for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
            assert relative(p.grad, q.grad) < 1e-4, (batch, name)
    assert COUNTS["compiles"] - before["compiles"] == 2
