"""Where compile-cache entries live: one file each under `<cache>/graphs/`, and, with
`CUVIL_CACHE_REDIS=redis://...`, a Redis server shared by many machines.

A lookup reads the local file, else the remote entry (and keeps a local copy); if neither
holds the key, the same for the key with any values of the constants (`key.any_values`:
a graph the optimizer made no constant for serves every weights-only update). Every entry
is checked (content hash and key) before use; a damaged one is a miss, with a warning,
and is rewritten. The files are entries of `cuvil.disk_store` (`GRAPHS`): written
atomically, refreshed by a hit, the least recently used removed while the cache is over
`CUVIL_CACHE_MAX_MB`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cuvil.atomic import write_text
from cuvil.cache import remote
from cuvil.cache.entry import Damaged, decode, encode, imported_refs
from cuvil.cache.key import Key, any_values, digest
from cuvil.disk_store import GRAPHS, Corrupt

if TYPE_CHECKING:
    from cuvil.ir.graph import Graph

# What the cache supplies; every other attribute of a graph comes from the fresh import.
# an entry of another key, or one this Cuvil cannot rebuild: a miss
ERRORS = (Damaged, ValueError, KeyError, TypeError, RuntimeError)
OPTIMIZED = frozenset({"name", "nodes", "inputs", "output_structure", "constants", "defs",
                       "report", "_counter", "mutations"})


def load(key: Key, imported: Graph, defs: Callable[[], dict[str, Any]]) -> Graph | None:
    """The optimized graph stored under `key`, else the one stored for any values of the
    constants (a weights-only change), completed from `imported`; else None."""
    found = _load(key, imported, defs)
    if found is None:
        found = _load(any_values(key, imported), imported, defs)
        if found is not None:
            graph, where = found
            return _finish(graph, imported, f"hit ({where}, the same program with other "
                                            "weights): optimization skipped")
        return None
    graph, where = found
    return _finish(graph, imported, f"hit ({where}, key {key.digest[:12]}): "
                                    "optimization skipped")


def store(key: Key, optimized: Graph, imported: Graph) -> None:
    """Write the entry for `key` here and to the shared cache (also for any values of the
    constants when the optimizer made none of its own); then keep the size limit."""
    keys = [key]
    if len(imported_refs(optimized, imported)) == len(optimized.constants):  # none made
        keys.append(any_values(key, imported))
    for k in keys:
        data = encode(k, optimized, imported)
        GRAPHS.put(k.digest, data)
        remote.put(k.digest, data)
    with contextlib.suppress(OSError):
        write_text(_last_of(key), json.dumps(key.parts, sort_keys=True))


def _load(key: Key, imported: Graph, defs) -> tuple[Graph, str] | None:
    graph = GRAPHS.load(key.digest, lambda data: decode(data, key, imported, defs), ERRORS)
    if graph is not None:
        return graph, "local"
    data = remote.get(key.digest)
    if data is None:
        return None
    try:
        graph = decode(data, key, imported, defs)
    except Corrupt as e:
        remote.damaged("graph", key.digest, e)
        return None
    except ERRORS:
        return None
    GRAPHS.put(key.digest, data)
    return graph, "shared"


def _finish(graph: Graph, imported: Graph, status: str) -> Graph:
    for attr, value in vars(imported).items():
        if attr not in OPTIMIZED:
            setattr(graph, attr, value)
    if graph.report is not None:  # the stored report, less the stages this hit skipped
        graph.report.graph = graph
        graph.report.cache = status
        graph.report.timings = {}
    return graph


def why_missed(key: Key) -> str:
    """Which parts of the key differ from the last compile of the same model (its name and
    its constants' refs, dtypes and shapes: `Key.identity`), each said as it applies."""
    try:
        last = json.loads(_last_of(key).read_text())
    except (OSError, ValueError):
        return f"no earlier compile of {key.name!r} with these parameters in this cache"
    changed = [_change(part, value, last.get(part)) for part, value in key.parts.items()
               if last.get(part) != value]
    if not changed:
        return f"the entry for {key.name!r} is missing or damaged"
    return f"{', '.join(changed)} since the last compile of {key.name!r}"


def _change(part: str, now: str, then: str | None) -> str:
    """What changed in one part of the key: calibration is said as added or dropped when
    one of the two compiles had none."""
    if part == "calibration" and now == "none":
        return "no calibration now (the last compile was calibrated)"
    if part == "calibration" and then == "none":
        return "calibration added"
    return f"{part} changed"


def entry_path(key: Key) -> Path:
    return GRAPHS.path(key.digest)


def _last_of(key: Key) -> Path:
    """Where the parts of the last key of `key`'s model are kept."""
    return GRAPHS.folder() / "last" / f"{key.identity or digest(key.name, 24)}.json"
