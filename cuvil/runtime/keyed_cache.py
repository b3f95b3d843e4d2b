"""Numba's on-disk cache entries made safe for processes that share one cache directory.

Numba's `IndexDataCacheFile` names a new entry's data file by the first number not in the
index it read, and rewrites the index from that read. Two processes that each compile an
overload of one function at once (two compile workers, two test workers) both read the
same index: both name their data `<function>.1.nbc`, and the index that lands last maps
one signature to the data the other wrote last. A load then installs the other
signature's code: a wrong result, or, for a driver called apart (`apart_calls`), its
fixed symbol defined twice in the JIT engine and the caller's left undefined, on which
LLVM aborts the process.

`KeyedCacheFile` replaces it for Cuvil's drivers and generated kernels:

- the data file is named by a hash of the entry's key (signature, target, bytecode), so
  two keys never share one; its content is Numba's own (any reader of Numba's index
  reads it), and one whose overload is not of the signature asked for is a miss;
- the index is read, updated and written under an exclusive lock, so no entry is lost;
- before an entry is rebuilt, the drivers its code calls apart are loaded and their
  symbols checked (`DriverLoad`): one that cannot be is a miss, and Numba compiles the
  function instead of loading code that names a symbol no one defines;
- a rebuilt entry's library keeps those loads (`InheritingImpl`): Numba's rebuild leaves
  them off the library, so a caller compiled later that links the loaded function would
  inherit none, and its own entry, loaded in the next process, would call a driver that
  nothing loaded there (LLVM aborts the process on the unresolved symbol).
"""

from __future__ import annotations

import contextlib
import hashlib
import os

from numba.core import sigutils
from numba.core.caching import CompileResultCacheImpl, IndexDataCacheFile

SIGNATURE, RELOAD_INIT = 3, 7  # their positions in a CompileResult's `_reduce()`


class KeyedCacheFile(IndexDataCacheFile):
    """Numba's index and data files, the data named and checked by the entry's key."""

    def save(self, key, data) -> None:
        name = self._keyed_name(key)
        self._save_data(name, data)
        with self._index_lock():
            overloads = self._load_index()
            if overloads.get(key) != name:
                overloads[key] = name
                self._save_index(overloads)

    def load(self, key):
        name = self._load_index().get(key)
        if name is None:
            return None
        try:
            data = self._load_data(name)
            same = tuple(data[SIGNATURE].args) == \
                tuple(sigutils.normalize_signature(key[0])[0])
        except Exception:  # noqa: BLE001  (missing, damaged, of another format: a miss)
            return None
        return data if same and _drivers_ready(data) else None

    def _keyed_name(self, key) -> str:
        digest = hashlib.sha256(repr(key).encode()).hexdigest()[:20]
        return f"{self._index_name.removesuffix('.nbi')}.{digest}.nbc"

    @contextlib.contextmanager
    def _index_lock(self):
        try:
            import fcntl
        except ImportError:  # no advisory locks here: Numba's unlocked update
            yield
            return
        fd = os.open(self._index_path + ".lock", os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock


def _drivers_ready(data) -> bool:
    """Load the drivers that the entry's code calls apart; False if one fails."""
    from cuvil.runtime.apart_calls import DriverLoad

    try:
        for load in data[RELOAD_INIT] or ():
            if isinstance(load, DriverLoad):
                load()
    except Exception:  # noqa: BLE001  (compiling reports what really fails)
        return False
    return True


class InheritingImpl(CompileResultCacheImpl):
    """Numba's rebuild of a cached overload, whose library keeps the entry's reload
    functions (the `DriverLoad`s), as a library compiled here does: a caller that links
    it inherits them (`CPUCodeLibrary.finalize`) and stores them in its own entry."""

    def rebuild(self, target_context, payload):
        cres = super().rebuild(target_context, payload)
        cres.library._reload_init.update(cres.reload_init or ())
        return cres


def use_keyed_file(dispatcher) -> None:
    """Give `dispatcher`'s on-disk cache (if it has Numba's) a `KeyedCacheFile`, and
    rebuilt overloads whose libraries keep their reload functions (`InheritingImpl`)."""
    cache = getattr(dispatcher, "_cache", None)
    if type(getattr(cache, "_impl", None)) is CompileResultCacheImpl:
        cache._impl.__class__ = InheritingImpl  # the same state; only `rebuild` differs
    plain = getattr(cache, "_cache_file", None)
    if type(plain) is IndexDataCacheFile:
        cache._cache_file = KeyedCacheFile(plain._cache_path,
                                           plain._index_name.removesuffix(".nbi"),
                                           plain._source_stamp)
