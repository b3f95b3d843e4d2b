"""Where Cuvil keeps its files: the cache directory, and hashes of Cuvil's own source.

The cache directory is `$CUVIL_CACHE_DIR`, else the user cache directory for `cuvil` as
platformdirs resolves it (`$XDG_CACHE_HOME/cuvil`, else `~/.cache/cuvil` on Linux). It holds
kernel modules, Numba's compiled drivers, checked rule libraries and optimized graphs. This
module sits below every package, so that any layer may name the directory.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

import platformdirs

PACKAGE = Path(__file__).parent


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    """`override`, else `$CUVIL_CACHE_DIR`, else the platform's user cache dir for cuvil."""
    if override is not None:
        return Path(override)
    if os.environ.get("CUVIL_CACHE_DIR"):
        return Path(os.environ["CUVIL_CACHE_DIR"])
    return Path(platformdirs.user_cache_dir("cuvil", appauthor=False))


def source_hash() -> str:
    """A hash of Cuvil's Python source and stock rules: a change invalidates cached work."""
    h = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        h.update(path.read_bytes())
    for path in sorted((PACKAGE / "stock_rules").rglob("*.cvr")):
        h.update(path.read_bytes())
    return h.hexdigest()[:32]


@functools.cache
def package_hash(package: str) -> str:
    """A hash of one subpackage's Python source (`"runtime"`: what compiled drivers and
    the kernels that import them are keyed on), read from the files once per process
    (every generated module's import lines quote it), importing nothing."""
    h = hashlib.sha256()
    for path in sorted((PACKAGE / package).rglob("*.py")):
        h.update(path.read_bytes())
    return h.hexdigest()[:12]
