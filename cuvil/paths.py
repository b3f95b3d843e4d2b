"""Where Cuvil keeps its files: the cache directory, and hashes of Cuvil's own source.

The cache directory is `$CUVIL_CACHE_DIR`, else the user cache directory for `cuvil` as
platformdirs resolves it (`$XDG_CACHE_HOME/cuvil`, else `~/.cache/cuvil` on Linux). It holds
kernel modules, Numba's compiled drivers, checked rule libraries and optimized graphs. This
module sits below every package, so that any layer may name the directory.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import time
from pathlib import Path

import platformdirs

PACKAGE = Path(__file__).parent
STAMP_SETTLE_S = 2.0  # files younger than this get no stamp (`files_hash`)


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    """`override`, else `$CUVIL_CACHE_DIR`, else the platform's user cache dir for cuvil."""
    if override is not None:
        return Path(override)
    if os.environ.get("CUVIL_CACHE_DIR"):
        return Path(os.environ["CUVIL_CACHE_DIR"])
    return Path(platformdirs.user_cache_dir("cuvil", appauthor=False))


@functools.cache
def source_hash() -> str:
    """A hash of Cuvil's Python source and stock rules: a change invalidates cached work."""
    return files_hash(PACKAGE, (".py", ".cvr"))[:32]


@functools.cache
def package_hash(package: str) -> str:
    """A hash of one subpackage's Python source (`"runtime"`: what compiled drivers and
    the kernels that import them are keyed on), once per process (every generated
    module's import lines quote it), importing nothing."""
    return files_hash(PACKAGE / package, (".py",))[:12]


def drivers_hash() -> str:
    """A hash of the source Cuvil's compiled drivers are built from: the runtime's and each
    target's `kernels/` (a target's kernels inline runtime code, and code of each other)."""
    import hashlib

    kernels = sorted(p.relative_to(PACKAGE).as_posix()
                     for p in (PACKAGE / "targets").glob("*/kernels") if p.is_dir())
    parts = [package_hash(folder) for folder in ("runtime", *kernels)]
    return hashlib.sha256(" ".join(parts).encode()).hexdigest()[:12]


def files_hash(folder: Path, suffixes: tuple[str, ...]) -> str:
    """SHA-256 of the names and contents of the files under `folder` ending in `suffixes`.

    The contents are read only when a file's size or modification time differs from the
    last time they were (a stamp file in the cache directory): the test Python itself
    applies to decide whether a module's cached bytecode is still its source. A stamp is
    not kept while a file is younger than STAMP_SETTLE_S (one changed again within the
    clock's resolution would look the same)."""
    files = _files_under(folder, suffixes)
    stamp = hashlib.sha256(repr([(str(p), st.st_size, st.st_mtime_ns)
                                 for p, st in files]).encode()).hexdigest()
    memo = cache_dir() / "stamps" / hashlib.sha256(f"{folder}{suffixes}".encode()).hexdigest()
    try:
        kept_stamp, kept_hash = memo.read_text().split()
        if kept_stamp == stamp:
            return kept_hash
    except (OSError, ValueError):
        pass
    h = hashlib.sha256()
    for path, _ in files:
        h.update(f"{path.relative_to(folder)}\0".encode())
        h.update(path.read_bytes())
    digest = h.hexdigest()
    if time.time() - max((st.st_mtime for _, st in files), default=0) > STAMP_SETTLE_S:
        with contextlib.suppress(OSError):
            from cuvil.atomic import write_text

            write_text(memo, f"{stamp} {digest}")
    return digest


def _files_under(folder: Path, suffixes: tuple[str, ...]) -> list[tuple[Path, os.stat_result]]:
    """(path, stat) of each file under `folder` ending in `suffixes`, in a fixed order."""
    found = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith(suffixes):
                path = Path(root, name)
                found.append((path, path.stat()))
    return found
