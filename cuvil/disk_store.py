"""The one disk store behind every cache of Cuvil: an entry is a file named by its key,
`<cache>/<kind>/<prefix><key><suffix>`, written atomically, its age the file's
modification time, which a hit refreshes; the directory kept under `CUVIL_CACHE_MAX_MB`
by removing the least recently used entries.

    GRAPHS = Store("graphs", ".cvg")
    found = GRAPHS.load(key, decode)   # decode(bytes), None on a miss; a hit is recent
    GRAPHS.put(key, data)              # atomic (bytes, or chunks never joined); the limit kept

A file of the store is the whole entry, so any number of processes may store and read at
once: a reader sees the old file or the new one (`cuvil.atomic`), with the mode the umask
gives. An entry whose bytes are not what was written (`Corrupt`: truncated, altered) is a
miss with one warning; the caller's compile writes it again. The users: optimized graphs
(`cache/store.py`), imported graphs (`cache/imports.py`), programs (`cache/programs.py`),
checked rule libraries (`library/stored.py`) and generated kernel modules
(`runtime/module_cache.py`, whose unit also holds Numba's files for the module,
`kernels/__pycache__/cuvil_<key>.*`). Rule libraries and Numba's drivers (`numba/`) are
counted but never evicted.

Eviction (`keep_size`) scans the directory under a file lock (one process at a time) and
never removes a unit used in the last minute. After a store, `after_store` scans only when
this process's running estimate of the size (the last scan's total plus what it stored
since) passes the limit, or the last scan is `RESCAN_S` old (other processes and Numba
write too).

Why not diskcache: it keeps each value in a file of its own choosing (kernel modules
must sit at the path Numba's cache is keyed on, and programs name them), and on the warm
path it costs more than the work it does. Measured on this machine (2 shared cores), a
60 kB entry: `import diskcache` 15-30 ms and `Cache()` (SQLite) 10-60 ms per process,
set 350 us, get 30-40 us; this store's put 160-210 us and get with touch 27-40 us, no
import beyond `filelock` when eviction runs. A warm `cuvil.compile` is a few ms.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuvil.atomic import write_chunks
from cuvil.errors import CuvilError
from cuvil.paths import cache_dir

DEFAULT_MAX_MB = 2048
KINDS = ("programs", "graphs", "imports", "kernels", "rules", "numba")
RECENT_S = 60.0
RESCAN_S = 60.0  # the longest `after_store` trusts its estimate of the directory's size


class Corrupt(CuvilError):
    """An entry whose bytes are not what was written: a miss, with a warning."""


@dataclass(frozen=True)
class Store:
    """The entries of one kind: `<cache>/<kind>/<prefix><key><suffix>`."""

    kind: str
    suffix: str
    prefix: str = ""
    evicted: bool = True  # whether `keep_size` may remove its entries

    def folder(self, root: str | os.PathLike | None = None) -> Path:
        return cache_dir(root) / self.kind

    def path(self, key: str, root: str | os.PathLike | None = None) -> Path:
        return self.folder(root) / f"{self.prefix}{key}{self.suffix}"

    def load(self, key: str, decode: Callable[[bytes], Any] = bytes,
             errors: type[Exception] | tuple = (), root=None) -> Any:
        """`decode` of the entry's bytes; None on a miss, when `decode` raises one of
        `errors`, or (with a warning) `Corrupt`. A hit refreshes the entry's time."""
        path = self.path(key, root)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        try:
            found = decode(data)
        except Corrupt as e:
            warnings.warn(f"cuvil: the {self.kind} cache entry {key[:12]} is damaged ({e}); "
                          "ignored, and written again", RuntimeWarning, stacklevel=2)
            return None
        except errors:
            return None
        touch(path)
        return found

    def put(self, key: str, data: bytes | Iterable, root=None) -> bool:
        """Write the entry (bytes, or bytes-like chunks written one after another);
        whether it was written (a read-only cache costs the next compile the work)."""
        chunks = [data] if isinstance(data, bytes | bytearray | memoryview) else list(data)
        try:
            write_chunks(self.path(key, root), chunks)
        except OSError:
            return False
        after_store(sum(memoryview(c).nbytes for c in chunks), root=cache_dir(root))
        return True

    def units(self, root: Path) -> list[Unit]:
        folder = root / self.kind
        return [Unit(self.kind, [p, *sorted((folder / "__pycache__").glob(f"{p.stem}.*"))])
                for p in sorted(folder.glob(f"{self.prefix}*{self.suffix}"))]


PROGRAMS = Store("programs", ".cvp")
GRAPHS = Store("graphs", ".cvg")
IMPORTS = Store("imports", ".cvi")
KERNELS = Store("kernels", ".py", prefix="cuvil_")
RULES = Store("rules", ".pickle", evicted=False)
STORES = (PROGRAMS, GRAPHS, IMPORTS, KERNELS, RULES)


def touch(path: Path) -> None:
    """Mark the entry at `path` used now."""
    with contextlib.suppress(OSError):
        os.utime(path)


@dataclass
class _Estimate:
    total: int  # bytes: the last scan's total, plus what was stored since
    scanned: float  # time.monotonic() of the last scan


_estimates: dict[Path, _Estimate] = {}  # cache root -> this process's estimate


@dataclass
class Unit:
    """What eviction removes at once: an entry's file with its companions."""

    kind: str
    files: list[Path] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(_size(f) for f in self.files)

    @property
    def used(self) -> float:
        return max((_mtime(f) for f in self.files), default=0.0)


def units(root: Path | None = None) -> list[Unit]:
    """Every unit eviction may remove."""
    root = root or cache_dir()
    return [u for store in STORES if store.evicted for u in store.units(root)]


def usage(root: Path | None = None) -> dict[str, tuple[int, int]]:
    """kind -> (entries, bytes) for each kind of thing the cache directory holds."""
    root = root or cache_dir()
    out = {kind: (0, 0) for kind in KINDS}
    for unit in (u for store in STORES for u in store.units(root)):
        n, b = out[unit.kind]
        out[unit.kind] = (n + 1, b + unit.size)
    numba = [p for p in (root / "numba").rglob("*") if p.is_file()]
    out["numba"] = (sum(p.suffix == ".nbi" for p in numba), sum(_size(p) for p in numba))
    return out


def clear(kinds: tuple[str, ...] = KINDS, root: Path | None = None) -> None:
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise CuvilError(f"unknown cache part(s) {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(KINDS)}")
    root = root or cache_dir()
    for kind in kinds:
        shutil.rmtree(root / kind, ignore_errors=True)


def max_bytes() -> int:
    text = os.environ.get("CUVIL_CACHE_MAX_MB", str(DEFAULT_MAX_MB))
    try:
        return int(float(text) * 1e6)
    except ValueError:
        raise CuvilError(f"CUVIL_CACHE_MAX_MB must be a number of megabytes, not "
                         f"{text!r}") from None


def keep_size(limit: int | None = None, root: Path | None = None) -> list[Unit]:
    """Scan the directory and remove the least recently used units while over `limit`;
    the units removed."""
    from filelock import FileLock, Timeout  # here: `cuvil --help` imports this module

    root = root or cache_dir()
    limit = max_bytes() if limit is None else limit
    try:
        with FileLock(root / ".evict.lock", timeout=0):
            removed, total = _evict(units(root), limit)
    except (Timeout, OSError):
        return []  # another process is at it, or the cache is read-only
    _estimates[root] = _Estimate(total, time.monotonic())
    return removed


def after_store(stored: int, limit: int | None = None, root: Path | None = None) -> list[Unit]:
    """`keep_size` when it may be needed: when the estimate of the size with the `stored`
    bytes just written passes `limit`, or the last scan is old; else nothing (no scan)."""
    root = root or cache_dir()
    limit = max_bytes() if limit is None else limit
    known = _estimates.get(root)
    if known is not None and time.monotonic() - known.scanned < RESCAN_S \
            and known.total + stored <= limit:
        known.total += stored
        return []
    return keep_size(limit, root)


def _evict(found: list[Unit], limit: int) -> tuple[list[Unit], int]:
    """Remove units, least recently used first, while over `limit`: (removed, bytes left)."""
    total = sum(u.size for u in found)
    removed, now = [], time.time()
    for unit in sorted(found, key=lambda u: u.used):
        if total <= limit:
            break
        if now - unit.used < RECENT_S:
            continue
        size = unit.size
        for f in unit.files:
            f.unlink(missing_ok=True)
        total -= size
        removed.append(unit)
    return removed, total


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
