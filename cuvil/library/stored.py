"""Checked rule libraries, kept so that the same rule files are parsed and checked once.

The key is a hash of the rule files' paths and text and of Cuvil's own source; a library
is kept in the process and, pickled, under `<cache>/rules/`. Loading the stock library
from there takes milliseconds instead of the grammar build, parse and check (about half a
second). Only libraries without errors are kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import pickle

from cuvil.atomic import write_bytes
from cuvil.library.checked import RuleLibrary
from cuvil.paths import cache_dir, source_hash

_IN_PROCESS: dict[str, RuleLibrary] = {}


def key(texts: list[tuple[str, str]]) -> str:
    h = hashlib.blake2b(digest_size=20)
    h.update(source_hash().encode())
    for path, text in texts:
        h.update(f"\x00{path}\x00{text}".encode())
    return h.hexdigest()


def _file(k: str):
    return cache_dir() / "rules" / f"{k}.pickle"


def get(k: str | None) -> RuleLibrary | None:
    if k is None:
        return None
    if k not in _IN_PROCESS:
        try:
            with open(_file(k), "rb") as f:
                _IN_PROCESS[k] = pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError):
            return None
    return _IN_PROCESS[k]


def put(k: str | None, library: RuleLibrary) -> None:
    if k is None:
        return
    _IN_PROCESS[k] = library
    with contextlib.suppress(OSError):  # a read-only cache only costs the next process a parse
        write_bytes(_file(k), pickle.dumps(library, protocol=pickle.HIGHEST_PROTOCOL))
