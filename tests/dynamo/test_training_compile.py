"""tests/dynamo/test_training_compile.py: `cuvil.compile(model, inputs, training=True)`
returns a module to train whose parameters are the model's: SGD steps on it follow eager's
losses, parameters and batch-norm statistics; compiling runs the graphs on a copy (the
model's parameters, gradients and buffers untouched) so that the first step's compiles are
served by Cuvil's caches; bad arguments get one-line errors."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import cuvil
from cuvil.dynamo import COUNTS
from cuvil.dynamo.training import TrainingModule


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 4 * 4, 10))


def state(module: nn.Module) -> dict[str, torch.Tensor]:
    """Parameters, buffers and gradients, copied."""
    out = {k: v.detach().clone() for k, v in module.state_dict().items()}
    out.update({f"{k}.grad": p.grad.clone() for k, p in module.named_parameters()
                if p.grad is not None})
    return out


def test_training_the_module_follows_eager_and_trains_the_model():
    torch.manual_seed(0)
    model = cnn().train()
    reference = copy.deepcopy(model)
    x, target = torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))
    before = state(model)
    net = cuvil.compile(model, (x,), training=True)
    assert isinstance(net, TrainingModule) and isinstance(net, nn.Module)
    after = state(model)
    assert after.keys() == before.keys()  # no gradient either
    for key, value in before.items():
        torch.testing.assert_close(after[key], value, rtol=0, atol=0, msg=key)
    assert [id(p) for p in net.parameters()] == [id(p) for p in model.parameters()]
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (net, reference)]
    for step in range(3):
        losses = []
        for m, optimizer in zip((net, reference), optimizers, strict=True):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(m(x), target)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        assert abs(losses[0] - losses[1]) <= 1e-5 * abs(losses[1]), step
    for key, value in state(reference).items():
        torch.testing.assert_close(state(model)[key], value, rtol=1e-4, atol=1e-6, msg=key)


def test_the_graphs_are_compiled_ahead_with_the_caches_on():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    x = torch.randn(8, 16)
    before = COUNTS["compiles"]
    net = cuvil.compile(model, x, training=True)
    assert COUNTS["compiles"] - before == 2  # the copy's forward and backward
    net(x).sum().backward()
    assert COUNTS["compiles"] - before == 4
    lazy = cuvil.compile(copy.deepcopy(model), x, training=True, cache=False)
    assert COUNTS["compiles"] - before == 4  # nothing ahead without the caches
    lazy(x).sum().backward()
    assert COUNTS["compiles"] - before == 6


def test_state_dict_is_the_models():
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    net = cuvil.compile(model, training=True)
    assert list(net.state_dict()) == list(model.state_dict())
    changed = {k: v + 1 for k, v in model.state_dict().items()}
    net.load_state_dict(changed)
    for key, value in changed.items():
        torch.testing.assert_close(model.state_dict()[key], value, msg=key)


def test_bad_arguments_get_one_line_errors():
    model = nn.Linear(4, 3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        cuvil.compile(model, training=True, bogus=1)
    with pytest.raises(cuvil.CuvilError, match="training=True compiles a torch.nn.Module"):
        cuvil.compile(lambda x: x, training=True)
