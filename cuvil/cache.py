"""The compile cache: an optimized graph stored under the hash of what the program is.

The key is computed from the imported graph, after export, never from the model object:

    program    the graph's structural hash: ops, attributes (scalars included), types with
               their symbolic dims, inputs and the output structure
    constants  the dtype, shape and bytes of every constant the graph holds
    rules      the text of every rule file
    options    targets, limits, extraction mode, disabled rules, the dim sizes costs assume
    versions   Cuvil's source, torch and egglog

Whatever export reads (Python attributes such as `self.k`, the training flag, branches on
either) is in the graph or its constants, so two models share an entry only when they are
the same program. Export is paid on every compile; a hit skips parsing, checking and the
optimizer. A miss says which parts changed since the last graph of the same name.

An entry `<cache>/graphs/<key>/` holds `graph.pickle` (the optimized graph without tensors),
`constants/` (the raw bytes of tensors the optimizer made; the imported ones come from the
fresh import) and `key.json` (the key's parts, the SHA-256 of every file, checked on load),
written atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import tempfile
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

import cuvil
from cuvil.atomic import write_text
from cuvil.ir.graph import Graph
from cuvil.runtime.module_cache import cache_dir

FORMAT = 2
# What the cache supplies; every other attribute of a graph comes from the fresh import.
OPTIMIZED = frozenset({"name", "nodes", "inputs", "output_structure", "constants", "defs",
                       "report", "_counter"})


@dataclass(frozen=True)
class Key:
    name: str  # the graph's name, to compare a miss with the last compile of that name
    parts: dict[str, str]

    @property
    def digest(self) -> str:
        text = json.dumps(self.parts, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:40]


def key_of(graph: Graph, rules: Any, options: dict[str, Any]) -> Key:
    """The key of optimizing the imported `graph` with `rules` and `options`."""
    parts = {"format": str(FORMAT), "versions": versions(),
             "program": graph.structural_hash(), "constants": constants_hash(graph),
             "rules": rules_hash(rules), "options": _digest(repr(sorted(options.items())))}
    return Key(graph.name, parts)


def load(key: Key, imported: Graph) -> Graph | None:
    """The cached optimized graph for `key`, its constants taken from `imported`; else None."""
    entry = _entry(key)
    try:
        meta = json.loads((entry / "key.json").read_text())
        data = (entry / "graph.pickle").read_bytes()
        if meta.get("parts") != key.parts or meta.get("sha256") != _digest(data, 64):
            return None  # damaged, or a different key in the same place: compile afresh
        graph = pickle.loads(data)
        for ref in graph.constants:  # placeholders: imported tensors by ref
            graph.constants[ref] = imported.constants[ref]
        for ref, (dtype, shape, sha) in meta["made"].items():
            graph.constants[ref] = _read_tensor(entry / "constants" / _file_of(ref), dtype,
                                                shape, sha)
    except (OSError, EOFError, KeyError, ValueError, TypeError, AttributeError,
            pickle.UnpicklingError, RuntimeError):
        return None
    for attr, value in vars(imported).items():
        if attr not in OPTIMIZED:
            setattr(graph, attr, value)
    if graph.report is not None:
        graph.report.graph = graph
        graph.report.cache = f"hit (key {key.digest[:12]}): optimization skipped"
    return graph


def store(key: Key, optimized: Graph, imported: Graph) -> None:
    """Write the entry for `key` atomically: a reader sees all of it or nothing."""
    shared = {ref for ref, t in optimized.constants.items()
              if imported.constants.get(ref) is t}
    slim = optimized.copy()
    slim.constants = dict.fromkeys(shared)  # filled from the import on load
    for attr in set(vars(slim)) - OPTIMIZED:
        setattr(slim, attr, None)
    if optimized.report is not None:  # the report, without its link back to the graph
        slim.report = replace(optimized.report, graph=None)
    data = pickle.dumps(slim)
    entry = _entry(key)
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=entry.parent, prefix=f".{entry.name}."))
    try:
        (tmp / "constants").mkdir()
        made = {ref: _write_tensor(tmp / "constants" / _file_of(ref), tensor)
                for ref, tensor in optimized.constants.items() if ref not in shared}
        (tmp / "graph.pickle").write_bytes(data)
        meta = {"name": key.name, "parts": key.parts, "sha256": _digest(data, 64),
                "made": made}
        (tmp / "key.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
        os.replace(tmp, entry)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process stored it first
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    write_text(_last_of(key.name), json.dumps(key.parts, sort_keys=True))


def why_missed(key: Key) -> str:
    """Which parts of the key differ from the last compile of a graph with the same name."""
    try:
        last = json.loads(_last_of(key.name).read_text())
    except (OSError, ValueError):
        return f"no earlier compile of {key.name!r} in this cache"
    changed = [part for part, value in key.parts.items() if last.get(part) != value]
    if not changed:
        return f"the entry for {key.name!r} is missing or damaged"
    return f"{', '.join(changed)} changed since the last compile of {key.name!r}"


def constants_hash(graph: Graph) -> str:
    """SHA-256 over the dtype, shape and bytes of each constant node, in graph order."""
    h = hashlib.sha256()
    for node in graph:
        if node.op == "const":
            tensor = graph.constants[node.attrs["ref"]]
            h.update(f"{node.attrs['ref']}:{tuple(tensor.shape)}:{tensor.dtype}\x00".encode())
            h.update(_tensor_bytes(tensor))
    return h.hexdigest()


def rules_hash(rules: Any) -> str:
    """A hash of the rule sources' paths and text, without parsing them."""
    from cuvil.dsl.diagnostics import Reporter
    from cuvil.rules.loader import read_sources

    h = hashlib.sha256()
    for path, text in read_sources(rules, Reporter()):
        h.update(f"{path}\x00{text}\x00".encode())
    return h.hexdigest()


@lru_cache(maxsize=1)
def versions() -> str:
    """Cuvil's source, and the versions of the libraries an optimized graph depends on."""
    return _digest(f"{cuvil_source_hash()} torch {torch.__version__} "
                   f"egglog {metadata.version('egglog')}")


@lru_cache(maxsize=1)
def cuvil_source_hash() -> str:
    root = Path(cuvil.__file__).parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.read_bytes())
    for path in sorted((root / "stock_rules").rglob("*.cvr")):
        h.update(path.read_bytes())
    return h.hexdigest()[:32]


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy())


def _write_tensor(path: Path, tensor: torch.Tensor) -> tuple[str, list[int], str]:
    """A tensor as its raw bytes (torch.load would import torch.distributed: ~2 s)."""
    data = bytes(_tensor_bytes(tensor))
    path.write_bytes(data)
    return str(tensor.dtype).removeprefix("torch."), list(tensor.shape), _digest(data, 64)


def _read_tensor(path: Path, dtype: str, shape: list[int], sha: str) -> torch.Tensor:
    data = bytearray(path.read_bytes())
    if _digest(bytes(data), 64) != sha:
        raise ValueError(f"{path}: damaged")
    flat = torch.frombuffer(data, dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    return flat.view(getattr(torch, dtype)).reshape(shape)


def _digest(data: str | bytes, size: int = 32) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()[:size]


def _entry(key: Key) -> Path:
    return cache_dir() / "graphs" / key.digest


def _last_of(name: str) -> Path:
    return cache_dir() / "graphs" / "last" / f"{_digest(name, 24)}.json"


def _file_of(ref: str) -> str:
    return ref.encode().hex()


