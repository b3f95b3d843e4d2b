"""tests/test_paths.py: the cache directory: CUVIL_CACHE_DIR first, then XDG_CACHE_HOME/cuvil."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cuvil.paths import cache_dir, source_hash


def test_override_then_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "c"))
    assert cache_dir(tmp_path / "o") == tmp_path / "o"
    assert cache_dir() == tmp_path / "c"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="XDG is the Linux layout")
def test_xdg_cache_home_on_linux(monkeypatch, tmp_path):
    monkeypatch.delenv("CUVIL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "cuvil"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "cuvil"


def test_source_hash_is_stable():
    assert source_hash() == source_hash() and len(source_hash()) == 32
