"""tests/ir/test_recipe.py: an imported graph records how each constant it computed at
import is made (`Graph.recipes`); the recipes survive pickling (the optimizer's child gets
the graph by pickle) and, replayed on another model's tensors, give that model's import."""

from __future__ import annotations

import pickle

import pytest
import torch

from cuvil.frontend import from_torch
from cuvil.ir.recipe import UNKNOWN, Call, Ref, resolve


class Folds(torch.nn.Module):
    """A linear layer (its weight transposed at import), a conv bias (broadcast) and a
    constant computed from two weights (folded at import)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)
        self.conv = torch.nn.Conv2d(2, 4, 1)
        self.scale = torch.nn.Parameter(torch.rand(4) - 0.5)  # erfinv: no catalog form

    def forward(self, x, img):
        shift = self.fc.bias * torch.erfinv(self.scale)
        return self.fc(x) + shift, self.conv(img)


def test_import_recipes_pickle_and_replay_to_the_new_models_constants():
    x, img = torch.randn(3, 8), torch.randn(1, 2, 5, 5)
    torch.manual_seed(0)
    graph = from_torch(Folds().eval(), (x, img))
    torch.manual_seed(1)
    other = Folds().eval()
    want = from_torch(other, (x, img))
    computed = [r for r in graph.constants if r in graph.recipes]
    assert {r.split(".")[-1] for r in computed} >= {"T", "bcast"}
    assert any(r.startswith("folded.") for r in computed)
    recipes = pickle.loads(pickle.dumps(graph.recipes))
    got = resolve(recipes, other.state_dict(), list(graph.constants), graph.constants)
    assert set(got) == set(want.constants)
    for ref, tensor in want.constants.items():
        assert torch.equal(got[ref], tensor), ref


def test_resolve_prefers_the_given_tensor_then_the_recipe_then_the_rest():
    recipes = {"w.T": Call(torch.transpose, (Ref("w"), 0, 1)), "odd": UNKNOWN}
    w, rest = torch.arange(6.0).reshape(2, 3), {"w.T": torch.zeros(3, 2), "c": torch.ones(1)}
    got = resolve(recipes, {"w": w}, ["w.T", "c"], rest)
    assert torch.equal(got["w.T"], w.T) and torch.equal(got["c"], rest["c"])
    with pytest.raises(LookupError):
        resolve(recipes, {"w": w}, ["odd"], rest)
    with pytest.raises(LookupError):
        resolve(recipes, {}, ["nowhere"], rest)
