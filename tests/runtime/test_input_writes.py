"""Models that write tensors in place compute what eager does, and a call writes the
caller's input exactly as the model does: in-place ops on a clone, on a slice, through a
view, on the input itself; on a second call, on a non-contiguous input, and when the
program cache serves the compile (no export)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import cuvil
from cuvil.ir.graph import Graph


class ReluClone(nn.Module):
    def forward(self, x):
        y = x.clone()
        y.relu_()
        return y + x


class MulClone(nn.Module):
    def forward(self, x):
        y = x.clone()
        y.mul_(3.0)
        return y - x


class SliceAdd(nn.Module):
    def forward(self, x):
        y = x.clone()
        y[:, :2].add_(1.0)
        return y


class ViewSigmoid(nn.Module):
    def forward(self, x):
        y = x.clone()
        y.view(16).sigmoid_()
        return y + x


class ReluInput(nn.Module):
    def forward(self, x):
        return x.relu_() * 2


class ColumnOfInput(nn.Module):
    def forward(self, x):
        x[:, 0].mul_(2)
        return x + 1


MODELS = [ReluClone, MulClone, SliceAdd, ViewSigmoid, ReluInput, ColumnOfInput]
WRITES_INPUT = (ReluInput, ColumnOfInput)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def same_as_eager(compiled, model: nn.Module, x: torch.Tensor) -> None:
    """`compiled(x)` returns what `model(x)` does and leaves `x` as the model leaves it."""
    eager_x, compiled_x = x.clone(), x.clone()
    expected = model(eager_x)
    torch.testing.assert_close(compiled(compiled_x), expected)
    torch.testing.assert_close(compiled_x, eager_x, rtol=0, atol=0)


@pytest.mark.parametrize("cls", MODELS, ids=lambda c: c.__name__)
def test_in_place_ops_compute_what_eager_does_cold_and_warm(cache_dir, cls):
    torch.manual_seed(0)
    model, example = cls(), torch.randn(2, 8)
    for _ in range(2):  # the second compile is served by the caches
        compiled = cuvil.compile(model, (example.clone(),))
        for _ in range(2):  # a second call too
            same_as_eager(compiled, model, torch.randn(2, 8))
        assert torch.equal(example, example.clone())
    writes = "the call writes input x, as the model does"
    assert (writes in str(compiled.report)) == (cls in WRITES_INPUT)
    if cls in WRITES_INPUT:
        assert compiled.report.program_cache.startswith("hit")


@pytest.mark.parametrize("cls", WRITES_INPUT, ids=lambda c: c.__name__)
def test_the_callers_tensor_is_written_whatever_its_layout(cls):
    torch.manual_seed(0)
    model = cls()
    compiled = cuvil.compile(model, (torch.randn(2, 8),), cache=False)
    same_as_eager(compiled, model, torch.randn(8, 2).t())  # not contiguous: converted
    array = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    eager_x = torch.from_numpy(array.copy())  # a numpy input is written too
    expected = model(eager_x)
    torch.testing.assert_close(compiled(array), expected)
    np.testing.assert_array_equal(array, eager_x.numpy())


def test_no_in_place_op_reaches_the_graph():
    graph = cuvil.optimize(ReluInput(), (torch.randn(2, 8),))
    assert not any(op.endswith("_") for op in graph.ops())
    assert graph.mutations and "write x <- " in graph.to_text()
    again = Graph.from_text(graph.to_text(), graph.constants)
    assert again.mutations == graph.mutations


class MaybeInPlace(nn.Module):
    def __init__(self, in_place: bool):
        super().__init__()
        self.in_place = in_place

    def forward(self, x):
        return (x.relu_() if self.in_place else torch.relu(x)) * 2


def test_a_program_that_writes_its_input_never_shares_a_cache_entry(cache_dir):
    """The same class, the same results, but one writes x in place: another key in every
    cache (the optimizer's, the import cache's, the program cache's)."""
    x = torch.randn(2, 8)
    graphs = [cuvil.from_torch(MaybeInPlace(flag), (x,)) for flag in (False, True)]
    assert graphs[0].structural_hash() != graphs[1].structural_hash()
    cuvil.compile(MaybeInPlace(False), (x,))
    compiled = cuvil.compile(MaybeInPlace(True), (x,))
    assert not compiled.report.program_cache
    assert "the call writes input x" in str(compiled.report)
    same_as_eager(compiled, MaybeInPlace(True), torch.randn(2, 8))
    again = cuvil.compile(MaybeInPlace(True), (x,))
    assert again.report.program_cache.startswith("hit")
    same_as_eager(again, MaybeInPlace(True), torch.randn(2, 8))
