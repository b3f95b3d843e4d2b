"""The cache directory's size limit: least recently used units go first, recent ones never;
`usage` counts what is there; `clear` empties a part; a hit makes a unit recent."""

from __future__ import annotations

import os
import time

import pytest

from cuvil import disk_store as evict
from cuvil.errors import CuvilError


def unit_files(root, kind: str, name: str, size: int, age_s: float):
    if kind == "graphs":
        files = [root / "graphs" / f"{name}.cvg"]
    else:
        files = [root / "kernels" / f"cuvil_{name}.py",
                 root / "kernels" / "__pycache__" / f"cuvil_{name}.f-1.py312.nbi"]
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"x" * size)
        os.utime(f, (time.time() - age_s,) * 2)
    return files


def test_least_recently_used_units_go_first(tmp_path):
    old = unit_files(tmp_path, "graphs", "old", 1000, 3600)
    mid = unit_files(tmp_path, "kernels", "mid", 500, 1800)
    new = unit_files(tmp_path, "graphs", "new", 1000, 600)
    removed = evict.keep_size(limit=2000, root=tmp_path)
    assert [u.files for u in removed] == [old]
    assert all(f.exists() for f in mid + new)
    evict.keep_size(limit=1000, root=tmp_path)
    assert not any(f.exists() for f in mid) and all(f.exists() for f in new)


def test_recently_used_units_are_kept_over_the_limit(tmp_path):
    recent = unit_files(tmp_path, "graphs", "recent", 1000, 1)
    assert evict.keep_size(limit=0, root=tmp_path) == []
    assert recent[0].exists()


def test_usage_and_clear(tmp_path):
    unit_files(tmp_path, "graphs", "a", 100, 10)
    unit_files(tmp_path, "kernels", "b", 50, 10)
    used = evict.usage(tmp_path)
    assert used["graphs"] == (1, 100) and used["kernels"] == (1, 100)
    evict.clear(("graphs",), root=tmp_path)
    assert evict.usage(tmp_path)["graphs"] == (0, 0)
    assert evict.usage(tmp_path)["kernels"] == (1, 100)
    with pytest.raises(CuvilError, match="unknown cache part"):
        evict.clear(("weights",), root=tmp_path)


def test_a_bad_limit_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_MAX_MB", "lots")
    with pytest.raises(CuvilError, match="CUVIL_CACHE_MAX_MB must be a number"):
        evict.max_bytes()


def test_a_store_scans_only_when_the_estimate_passes_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(evict, "_estimates", {})
    scans, scan = [], evict.units
    monkeypatch.setattr(evict, "units", lambda root=None: scans.append(root) or scan(root))
    old = unit_files(tmp_path, "graphs", "old", 1000, 3600)
    unit_files(tmp_path, "graphs", "new", 1000, 600)
    assert evict.after_store(1000, limit=2500, root=tmp_path) == [] and len(scans) == 1
    assert evict.after_store(400, limit=2500, root=tmp_path) == [] and len(scans) == 1
    newest = unit_files(tmp_path, "graphs", "newest", 600, 300)
    removed = evict.after_store(600, limit=2500, root=tmp_path)  # 2400 + 600 > 2500: scan
    assert len(scans) == 2 and [u.files for u in removed] == [old] and newest[0].exists()


def test_a_store_scans_again_once_the_estimate_is_old(tmp_path, monkeypatch):
    monkeypatch.setattr(evict, "_estimates", {})
    monkeypatch.setattr(evict, "RESCAN_S", 0.0)
    old = unit_files(tmp_path, "graphs", "old", 1000, 3600)
    assert evict.after_store(0, limit=5000, root=tmp_path) == []
    unit_files(tmp_path, "kernels", "other_process", 2000, 600)  # written by someone else
    removed = evict.after_store(0, limit=4500, root=tmp_path)  # 5000 bytes now
    assert [u.files for u in removed] == [old]
