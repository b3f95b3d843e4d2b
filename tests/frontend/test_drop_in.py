"""Drop-in results: a compiled model returns what the torch model returns (namedtuples,
dicts, nested tuples, its own output classes), also after its graph is pickled; plain
functions compile as torch.compile accepts them; an input that requires grad warns."""

from __future__ import annotations

import pickle
from collections import namedtuple

import pytest
import torch
from torch import nn

import cuvil
from cuvil.ops.execute import run

Pair = namedtuple("Pair", ["low", "high"])


class Structured(nn.Module):
    def forward(self, x):
        y = torch.relu(x) * 2
        return {"pair": Pair(y.amax(-1), y.sum(-1)), "nested": (x - 1, [x.exp()])}


def assert_same(got, want):
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            assert_same(got[k], want[k])
    else:
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_same(g, w)


def test_compiled_model_returns_the_models_containers():
    x = torch.randn(3, 5)
    fast = cuvil.compile(Structured(), (x,), cache=False)
    for batch in (3, 6):
        x = torch.randn(batch, 5)
        assert_same(fast(x), Structured()(x))


def test_reference_run_returns_the_models_containers_after_a_pickle():
    x = torch.randn(3, 5)
    graph = pickle.loads(pickle.dumps(cuvil.from_torch(Structured(), (x,))))
    assert_same(run(graph, x), Structured()(x))


def test_a_plain_function_compiles_like_a_module():
    def gated(x, y):
        return torch.sigmoid(x) * y, x + y

    x, y = torch.randn(4, 3), torch.randn(4, 3)
    fast = cuvil.compile(gated, (x, y), cache=False)
    assert fast.graph.name == "gated"
    x, y = torch.randn(7, 3), torch.randn(7, 3)
    assert_same(fast(x, y), gated(x, y))
    assert_same(run(cuvil.optimize(gated, (x, y)), x, y), gated(x, y))


def test_an_input_that_requires_grad_warns_that_autograd_is_not_tracked():
    model = nn.Linear(3, 2)
    x = torch.randn(4, 3, requires_grad=True)
    fast = cuvil.compile(model, (x.detach(),), cache=False)
    with pytest.warns(UserWarning, match="input 'input' requires grad.*does not track "
                                         "autograd"):
        got = fast(x)
    with torch.no_grad():
        torch.testing.assert_close(got, model(x))
