"""The cache directory's size: what it holds (`usage`), emptying it (`clear`), and keeping it
under `CUVIL_CACHE_MAX_MB` by removing the least recently used units (`keep_size`).

A unit is one compiled program (`programs/<key>.cvp`), one optimized graph
(`graphs/<key>.cvg`), one imported graph (`imports/<key>.cvi`)
or one generated module (a kernel's, or a graph's entry) with Numba's files for it
(`kernels/cuvil_<hash>.py` and `kernels/__pycache__/cuvil_<hash>.*`); its age is its file's
modification time, which a hit refreshes. One process evicts at a time (a file lock); a
unit used in the last minute is never removed.

`keep_size` scans the whole directory. After a store, `after_store` scans only when this
process's running estimate of the size (the last scan's total plus what it stored since)
passes the limit, or the last scan is `RESCAN_S` old (other processes and Numba write too).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from cuvil.errors import CuvilError
from cuvil.paths import cache_dir

DEFAULT_MAX_MB = 2048
KINDS = ("programs", "graphs", "imports", "kernels", "rules", "numba")
RECENT_S = 60.0
RESCAN_S = 60.0  # the longest `after_store` trusts its estimate of the directory's size


@dataclass
class _Estimate:
    total: int  # bytes: the last scan's total, plus what was stored since
    scanned: float  # time.monotonic() of the last scan


_estimates: dict[Path, _Estimate] = {}  # cache root -> this process's estimate


@dataclass
class Unit:
    kind: str
    files: list[Path] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(_size(f) for f in self.files)

    @property
    def used(self) -> float:
        return max((_mtime(f) for f in self.files), default=0.0)


def units(root: Path | None = None) -> list[Unit]:
    root = root or cache_dir()
    found = [Unit("programs", [p]) for p in sorted((root / "programs").glob("*.cvp"))]
    found += [Unit("graphs", [p]) for p in sorted((root / "graphs").glob("*.cvg"))]
    found += [Unit("imports", [p]) for p in sorted((root / "imports").glob("*.cvi"))]
    kernels = root / "kernels"
    for module in sorted(kernels.glob("cuvil_*.py")):
        found.append(Unit("kernels", [module, *sorted(
            (kernels / "__pycache__").glob(f"{module.stem}.*"))]))
    return found


def usage(root: Path | None = None) -> dict[str, tuple[int, int]]:
    """kind -> (entries, bytes) for each kind of thing the cache directory holds."""
    root = root or cache_dir()
    out = {kind: (0, 0) for kind in KINDS}
    for unit in units(root):
        n, b = out[unit.kind]
        out[unit.kind] = (n + 1, b + unit.size)
    rules = list((root / "rules").glob("*.pickle"))
    out["rules"] = (len(rules), sum(_size(p) for p in rules))
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
