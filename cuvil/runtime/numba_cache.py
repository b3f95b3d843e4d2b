"""`njit` for Cuvil's own compiled drivers (`blas`, `conv`, `vmath`, `int8`), cached on
disk under the Cuvil cache directory (`<cache>/numba/<runtime hash>/`), never next to the
installed package.

Numba's `cache=True` writes to a `__pycache__` beside the source file; an installed package
may be read-only, and a shared one would mix users' entries. A locator placed first in
Numba's list sends files from this package to the cache directory and leaves every other
function (generated kernel modules already live in `<cache>/kernels/`) as Numba has it.

Numba checks only a cached function's own file, but drivers inline code of other runtime
files (`conv` calls `blas`, `int8` the IR tile of `int8_tile`). So the directory is named
by `runtime_hash()`, the hash of every runtime source file: any change there recompiles
every driver, once. Generated modules quote the same hash in their import lines.
"""

from __future__ import annotations

import os
import tempfile
from functools import cache
from pathlib import Path

import numba
from numba.core.caching import CacheImpl, UserProvidedCacheLocator

from cuvil.paths import cache_dir, package_hash

PACKAGE = Path(__file__).resolve().parents[1]


@cache
def runtime_hash() -> str:
    """A hash of the runtime package's Python source (the drivers and what they inline)."""
    return package_hash("runtime")


class PackageLocator(UserProvidedCacheLocator):
    """Cache files of functions defined in the cuvil package go to `<cache>/numba/`."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = str(cache_dir() / "numba" / runtime_hash() /
                               self.get_suitable_cache_subpath(py_file))

    def ensure_cache_path(self) -> None:
        _writable(self._cache_path)

    @classmethod
    def from_function(cls, py_func, py_file):
        if not _in_package(py_file):
            return None
        return super(UserProvidedCacheLocator, cls).from_function(py_func, py_file)


@cache
def _in_package(py_file: str) -> bool:
    return Path(py_file).resolve().is_relative_to(PACKAGE)


_WRITABLE: set[str] = set()


def _writable(path: str) -> None:
    """Numba's check that a cache directory exists and takes files, once per directory
    and process (while it exists) rather than once per function: the runtime defines
    ~110, which cost 50 ms of a warm compile. A failure raises OSError as in Numba."""
    if path in _WRITABLE and os.path.isdir(path):
        return
    os.makedirs(path, exist_ok=True)
    tempfile.TemporaryFile(dir=path).close()
    _WRITABLE.add(path)


def njit(*args, **options):
    """`numba.njit(..., cache=True)` with the cache under the Cuvil cache directory."""
    if PackageLocator not in CacheImpl._locator_classes:
        CacheImpl._locator_classes.insert(0, PackageLocator)
    return numba.njit(*args, cache=True, **options)
