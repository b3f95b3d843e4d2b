"""The compile cache: an optimized graph stored under the hash of what the program is.

    key = key_of(imported_graph, rules, options)      # key.py: six parts a miss can name
    graph = load(key, imported_graph, defs)           # store.py: local file, then Redis
    store(key, optimized, imported_graph)             # entry.py: checksummed bytes

Export is paid on every compile (the key is the traced program, never the model object);
a hit skips parsing, checking and the optimizer. `evict.py` keeps the directory under its
size limit and backs `cuvil cache info|clear`. See docs/explanation/caches.md.
"""

from cuvil.cache.key import Key, constants_hash, cuvil_source_hash, key_of, rules_hash, versions
from cuvil.cache.store import load, store, why_missed

__all__ = ["Key", "constants_hash", "cuvil_source_hash", "key_of", "load", "rules_hash",
           "store", "versions", "why_missed"]
