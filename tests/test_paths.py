"""tests/test_paths.py: the cache directory (CUVIL_CACHE_DIR first, then
XDG_CACHE_HOME/cuvil), and the hashes of source trees with their stamps."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest

from cuvil import paths
from cuvil.paths import cache_dir, files_hash, source_hash


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


def _tree(root: Path, files: dict[str, str], age_s: float = 60.0) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, ns=(path.stat().st_mtime_ns - int(age_s * 1e9),) * 2)
    return root


def _read_all(root: Path, names: list[str]) -> str:
    h = hashlib.sha256()
    for name in names:  # in the walk's order: sorted by folder, then by name
        h.update(f"{name}\0".encode() + (root / name).read_bytes())
    return h.hexdigest()


def test_a_tree_hash_is_its_names_and_contents_and_follows_an_edit(monkeypatch, tmp_path):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))
    root = _tree(tmp_path / "src", {"a.py": "x = 1\n", "sub/b.py": "y = 2\n", "c.txt": "-"})
    first = files_hash(root, (".py",))
    assert first == _read_all(root, ["a.py", "sub/b.py"])  # c.txt is not a source
    assert list((tmp_path / "cache" / "stamps").iterdir())  # a stamp was kept
    assert files_hash(root, (".py",)) == first  # from the stamp
    _tree(root, {"sub/b.py": "y = 3\n"})  # same size, another time: read again
    assert files_hash(root, (".py",)) == _read_all(root, ["a.py", "sub/b.py"]) != first


def test_the_stamp_is_what_is_trusted_and_young_files_get_none(monkeypatch, tmp_path):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))
    root = _tree(tmp_path / "src", {"a.py": "x = 1\n"})
    first = files_hash(root, (".py",))
    stat = (root / "a.py").stat()
    (root / "a.py").write_text("x = 2\n")  # as Python's bytecode check: size and time
    os.utime(root / "a.py", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert files_hash(root, (".py",)) == first
    young = _tree(tmp_path / "young", {"a.py": "x = 1\n"}, age_s=0)
    files_hash(young, (".py",))
    assert len(list((tmp_path / "cache" / "stamps").iterdir())) == 1  # the old tree's only


def test_the_package_hashes_are_taken_once_per_process(monkeypatch):
    calls = []
    monkeypatch.setattr(paths, "files_hash", lambda *a: calls.append(a) or "0" * 64)
    paths.source_hash.cache_clear()
    try:
        assert paths.source_hash() == paths.source_hash() == "0" * 32 and len(calls) == 1
    finally:
        paths.source_hash.cache_clear()


def test_moving_a_module_changes_the_tree_hash(monkeypatch, tmp_path):
    """A program cached before a module moved (its generated code naming the old path) is
    keyed on the old source hash: after the move, a miss that recompiles."""
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))
    root = _tree(tmp_path / "src", {"old/kernel.py": "x = 1\n"})
    before = files_hash(root, (".py",))
    (root / "new").mkdir()
    (root / "old" / "kernel.py").rename(root / "new" / "kernel.py")
    assert files_hash(root, (".py",)) != before
