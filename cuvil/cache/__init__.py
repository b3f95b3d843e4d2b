"""The compile cache: an optimized graph stored under the hash of what the program is.

    key = key_of(imported_graph, rules, options)      # key.py: six parts a miss can name
    graph = load(key, imported_graph, defs)           # store.py: local file, then Redis
    store(key, optimized, imported_graph)             # entry.py: a safetensors file

The key is the imported program, never the model object; a hit skips parsing, checking and
the optimizer. The imported graph itself comes from the import cache (`imports.py`, keyed
on a symbolic trace of the model) when export agreed with that trace before, so a warm
compile skips torch.export. Every entry is a file of `cuvil.disk_store`, which keeps the
directory under its size limit and backs `cuvil cache info|clear`. See
docs/explanation/caches.md.
"""

from cuvil.cache.key import Key, constants_hash, cuvil_source_hash, key_of, rules_hash, versions
from cuvil.cache.store import load, store, why_missed

__all__ = ["Key", "constants_hash", "cuvil_source_hash", "key_of", "load", "rules_hash",
           "store", "versions", "why_missed"]
