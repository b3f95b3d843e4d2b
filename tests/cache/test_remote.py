"""The shared tier on a real Redis server: a second machine (another cache directory) gets
a hit and keeps a local copy; entries are checksummed data, never pickles; a damaged
entry is a miss, and so is one the fleet secret did not sign; entries carry the fleet's
lifetime (`CUVIL_CACHE_TTL`); a server that is down costs one warning, never a wrong or
failed compile."""

from __future__ import annotations

import shutil
import warnings

import pytest
import torch

import cuvil
from cuvil.cache import entry, remote, tensor_entry


class Affine(torch.nn.Module):
    def __init__(self, k: float):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)
        self.k = k

    def forward(self, x):
        return torch.relu(self.lin(x)) * self.k


def compile_in(cache_dir, monkeypatch, model, x):
    """The graph cache's status of compiling `model` with cache `cache_dir` (its program
    cache emptied first: that would serve a second compile before the graph cache)."""
    shutil.rmtree(cache_dir / "programs", ignore_errors=True)
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(cache_dir))
    fast = cuvil.compile(model, (x,))
    torch.testing.assert_close(fast(x), model(x))
    return fast.report.optimizer.cache


def test_a_second_machine_hits_the_shared_entry(shared, tmp_path, monkeypatch):
    torch.manual_seed(0)
    model, x = Affine(2.0), torch.randn(3, 8)
    assert compile_in(tmp_path / "a", monkeypatch, model, x).startswith("miss")
    names = shared.keys("cuvil:graph:*")  # the key, and the key for any weights
    assert len(names) == 2
    assert all(tensor_entry.metadata(shared.get(n))["format"] == entry.FORMAT
               for n in names)  # a safetensors file: data, no pickle
    assert compile_in(tmp_path / "b", monkeypatch, model, x).startswith("hit (shared")
    assert list((tmp_path / "b" / "graphs").glob("*.cvg"))  # kept locally too
    assert compile_in(tmp_path / "b", monkeypatch, model, x).startswith("hit (local")
    assert compile_in(tmp_path / "c", monkeypatch, Affine(3.0), x).startswith("miss")


def test_entries_carry_the_fleet_ttl(shared, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_TTL", "600")
    remote.put("k1", b"data")
    assert 590 <= shared.ttl(remote.PREFIX + "k1") <= 600
    monkeypatch.setenv("CUVIL_CACHE_TTL", "soon")
    with pytest.warns(RuntimeWarning, match="CUVIL_CACHE_TTL='soon' is not a positive"):
        remote.put("k2", b"data")
    assert shared.ttl(remote.PREFIX + "k2") == -1  # no lifetime
    assert remote.get("k2") == b"data"


def test_a_damaged_shared_entry_is_a_miss(shared, tmp_path, monkeypatch):
    torch.manual_seed(0)
    model, x = Affine(2.0), torch.randn(3, 8)
    compile_in(tmp_path / "a", monkeypatch, model, x)
    for name in shared.keys("cuvil:graph:*"):
        shared.set(name, shared.get(name).replace(b'"relu', b'"tanh', 1))
    with pytest.warns(RuntimeWarning, match="shared graph entry .* is damaged"):
        assert compile_in(tmp_path / "b", monkeypatch, model, x).startswith("miss")


def test_with_a_fleet_secret_an_entry_it_did_not_sign_is_refused(shared, tmp_path,
                                                                 monkeypatch):
    """An entry with a right checksum but written under another secret is optimized again
    here (with a warning); one signed with the fleet's secret is a shared hit."""
    torch.manual_seed(0)
    model, x = Affine(2.0), torch.randn(3, 8)
    monkeypatch.setenv("CUVIL_CACHE_SECRET", "not the fleet's")
    compile_in(tmp_path / "a", monkeypatch, model, x)
    monkeypatch.setenv("CUVIL_CACHE_SECRET", "the fleet's")
    with pytest.warns(RuntimeWarning, match="not signed with CUVIL_CACHE_SECRET; refused"):
        assert compile_in(tmp_path / "b", monkeypatch, model, x).startswith("miss")
    assert compile_in(tmp_path / "c", monkeypatch, model, x).startswith("hit (shared")


def test_a_server_that_is_down_costs_one_warning(tmp_path, monkeypatch, dead_redis_url):
    monkeypatch.setenv("CUVIL_CACHE_REDIS", dead_redis_url)
    remote._down.clear()
    torch.manual_seed(0)
    model, x = Affine(2.0), torch.randn(3, 8)
    with pytest.warns(RuntimeWarning, match="unavailable") as caught:
        assert compile_in(tmp_path / "a", monkeypatch, model, x).startswith("miss")
    assert len(caught) == 1
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        assert compile_in(tmp_path / "a", monkeypatch, model, x).startswith("hit (local")
    assert not [w for w in again if "unavailable" in str(w.message)]
