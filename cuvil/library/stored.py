"""Checked rule libraries, kept so that the same rule files are parsed and checked once.

The key is a hash of the rule files' paths and text and of Cuvil's own source; a library
is kept in the process and, pickled, under `<cache>/rules/` (`cuvil.disk_store.RULES`:
written atomically, counted in the cache's size, never evicted). Loading the stock library
from there takes milliseconds instead of the grammar build, parse and check (about half a
second). Only libraries without errors are kept.
"""

from __future__ import annotations

import hashlib
import pickle

from cuvil.disk_store import RULES
from cuvil.library.checked import RuleLibrary
from cuvil.paths import source_hash

_IN_PROCESS: dict[str, RuleLibrary] = {}


def key(texts: list[tuple[str, str]]) -> str:
    h = hashlib.blake2b(digest_size=20)
    h.update(source_hash().encode())
    for path, text in texts:
        h.update(f"\x00{path}\x00{text}".encode())
    return h.hexdigest()


def get(k: str | None) -> RuleLibrary | None:
    if k is None:
        return None
    if k not in _IN_PROCESS:
        found = RULES.load(k, pickle.loads, (EOFError, pickle.UnpicklingError, AttributeError,
                                             ImportError, ValueError))
        if found is None:
            return None
        _IN_PROCESS[k] = found
    return _IN_PROCESS[k]


def put(k: str | None, library: RuleLibrary) -> None:
    if k is None:
        return
    _IN_PROCESS[k] = library
    # a read-only cache only costs the next process a parse
    RULES.put(k, pickle.dumps(library, protocol=pickle.HIGHEST_PROTOCOL))
