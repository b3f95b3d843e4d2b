"""The fake-tensor key of a model torch.fx cannot trace: it changes with what the model
computes at the example shapes, not with a rebuild; it vouches for those shapes alone, so a
model that differs only at other shapes shares the key, and the program cache's hit runs
the example shapes alone: any other shape compiles the model first, and is correct."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import cuvil
from cuvil.frontend.canonical import NotCacheable
from cuvil.frontend.fingerprint import fingerprint


class Gated(nn.Module):
    """Goes one of two ways by its length (torch.fx cannot trace that; torch.export narrows
    the length to one side); `limit` is a number the graph never shows."""

    def __init__(self, limit: int = 100, k: float = 2.0, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.emb, self.limit, self.k = nn.Embedding(50, 4), limit, k

    def forward(self, ids):
        y = self.emb(ids)
        return y * self.k if ids.shape[1] <= self.limit else y - 1.0


class Offset(Gated):
    """Adds a tensor it makes in forward: a constant the fake run meets as a real tensor."""

    def __init__(self, offset: float):
        super().__init__()
        self.offset = offset

    def forward(self, ids):
        return super().forward(ids) + torch.tensor([0.0, 1.0, 2.0, self.offset])


X = torch.randint(0, 50, (2, 4))


@pytest.fixture
def fresh_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))


def key(model, x=X):
    return fingerprint(model, (x,), None)


def test_a_model_torch_fx_cannot_trace_gets_a_key_for_its_example_shapes():
    fp = key(Gated())
    assert fp.parts["trace"] == "fake, example shapes"
    assert fp.shapes == [((2, 4), torch.int64)]
    assert key(Gated()).parts == fp.parts  # rebuilt the same: the same key


@pytest.mark.parametrize("other", [
    lambda: (Gated(seed=1), X),  # other weights
    lambda: (Gated(k=3.0), X),  # another literal on the path taken
    lambda: (Gated(), torch.randint(0, 50, (2, 5))),  # other example shapes
    lambda: (Gated(), X.int()),  # another dtype
    lambda: (Offset(3.0), X),  # a constant made in forward, against Offset(4.0)'s
])
def test_what_the_example_shapes_compute_is_in_the_key(other):
    model, x = other()
    same = Offset(4.0) if isinstance(model, Offset) else Gated()
    assert key(model, x).parts != key(same).parts


def test_a_number_read_only_at_other_shapes_is_not():
    """The limit is the hazard the shapes guard against: both models take one branch at
    length 4."""
    assert key(Gated(limit=100)).parts == key(Gated(limit=5)).parts


class ValueBranch(nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x  # on data: no fake tensor can say


class Counting(nn.Module):
    def forward(self, x):
        self.seen = x.shape[0]  # a cache of its own, filled by every run
        return x + 1 if x.shape[0] > 1 else x


def test_what_a_fake_run_cannot_vouch_for_refuses():
    with pytest.raises(NotCacheable, match="torch.fx cannot trace it.*nor can a fake"):
        key(ValueBranch())
    model = Counting()
    with pytest.raises(NotCacheable, match="forward sets Counting.seen"):
        key(model)
    assert "seen" not in vars(model)  # put back as it was


@pytest.mark.parametrize(("stored", "hit"), [(100, 5), (5, 100)])
def test_a_hit_runs_the_example_shapes_and_compiles_the_model_for_others(fresh_cache_dir,
                                                                         stored, hit):
    """Gated(limit=hit) hits the program of Gated(limit=stored) (the same key), which is
    the model's at length 4 alone. At length 8 the model itself is compiled first: it
    computes `y - 1` where its limit is 5 (not the stored program's `y * 2`), and where
    its limit is 100 it runs, though the stored program (traced for lengths ..5) would
    refuse."""
    assert cuvil.compile(Gated(limit=stored), (X,)).report.program_cache == ""
    model = Gated(limit=hit)
    compiled = cuvil.compile(model, (X,))
    assert "hit" in compiled.report.program_cache
    assert "example inputs' shapes alone" in compiled.report.program_cache
    longer = torch.randint(0, 50, (3, 8))
    with torch.no_grad():
        torch.testing.assert_close(compiled(X), model(X))
        if hit == 5:  # the model compiled afresh is traced for lengths ..5
            with pytest.raises(cuvil.CuvilError, match=r"seq = 8 is outside \.\.5"):
                compiled(longer)
        else:
            torch.testing.assert_close(compiled(longer), model(longer))
        assert compiled.report.program_cache == ""  # the usual compile's program now
        torch.testing.assert_close(compiled(X), model(X))
