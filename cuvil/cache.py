"""The compile cache: a second process compiling the same model skips export and optimization.

An entry is keyed by everything the optimized graph depends on: Cuvil's own source, the
torch version, the model's class and the source files of its module classes, its weights
(names, shapes, dtypes and bytes), the example inputs' shapes and dtypes, the rule files'
text and the compile options. It holds the optimized graph (pickled, without tensors), the
constants the model does not own (transposed weights prepared at import, folded constants;
`torch.save` files) and nothing else: the model's own weights are taken from the model
again, by reference.
Generated kernels have their own cache (`cuvil/runtime/module_cache.py`), keyed by their
source text. Entries are directories written atomically under `<cache>/graphs/`.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import pickle
import shutil
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

import cuvil
from cuvil.ir.graph import Graph
from cuvil.runtime.module_cache import cache_dir

FORMAT = 1


def model_key(model: Any, example_inputs: Any, options: dict[str, Any]) -> str | None:
    """The cache key of compiling `model`, or None when it cannot be cached safely."""
    if not isinstance(model, torch.nn.Module):
        return None
    h = hashlib.blake2b(digest_size=20)
    for part in (str(FORMAT), cuvil_source_hash(), torch.__version__,
                 f"{type(model).__module__}.{type(model).__qualname__}",
                 *_class_sources(model), _rules_hash(options.get("rules")),
                 repr(sorted((k, repr(v)) for k, v in options.items() if k != "rules")),
                 repr([(tuple(x.shape), str(x.dtype)) for x in example_inputs or ()])):
        h.update(part.encode())
        h.update(b"\x00")
    for name, tensor in model.state_dict().items():
        h.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        h.update(_tensor_bytes(tensor))
    return h.hexdigest()


def load(key: str, model: torch.nn.Module) -> Graph | None:
    """The cached optimized graph for `key`, with `model`'s weights attached; else None."""
    entry = _entry(key)
    try:
        with open(entry / "graph.pickle", "rb") as f:
            graph, owned = pickle.load(f)
        own = model.state_dict()
        for ref in owned:
            graph.constants[ref] = own[ref]
        for path in sorted((entry / "constants").glob("*.pt")):
            graph.constants[_ref_of(path.stem)] = torch.load(path, weights_only=True)
        if graph.report is not None:
            graph.report.graph = graph
            graph.report.notes.append("from the compile cache: export and optimization "
                                      "skipped")
        return graph
    except (OSError, EOFError, KeyError, pickle.UnpicklingError, ValueError):
        return None  # missing or damaged: compile afresh


def store(key: str, graph: Graph, model: torch.nn.Module) -> None:
    """Write the entry for `key` (atomically: a reader sees all of it or nothing)."""
    from dataclasses import replace

    own = {_storage(t): name for name, t in model.state_dict().items()}
    slim = graph.copy()
    if graph.report is not None:  # the report, without its link back to the graph
        slim.report = replace(graph.report, graph=None)
    owned = {ref: own[_storage(t)] for ref, t in graph.constants.items()
             if _storage(t) in own}
    slim.constants = {}
    entry = _entry(key)
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=entry.parent, prefix=f".{key}."))
    try:
        (tmp / "constants").mkdir()
        for ref, tensor in graph.constants.items():
            if ref not in owned:
                torch.save(tensor.detach(), tmp / "constants" / f"{_file_of(ref)}.pt")
        renamed = _rename_refs(slim, owned)
        with open(tmp / "graph.pickle", "wb") as f:
            pickle.dump((renamed, sorted(set(owned.values()))), f)
        os.replace(tmp, entry)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process stored it first
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _rename_refs(graph: Graph, owned: dict[str, str]) -> Graph:
    """Constants the model owns are referred to by their state_dict names."""
    from dataclasses import replace

    for node in list(graph):
        if node.op == "const" and node.attrs["ref"] in owned:
            graph.replace_node(replace(node, attrs={"ref": owned[node.attrs["ref"]]}))
    return graph


def _storage(t: torch.Tensor) -> tuple:
    """Identity of a tensor's memory: a parameter and its state_dict entry share it."""
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape),
            tuple(t.stride()), t.dtype)


def _entry(key: str) -> Path:
    return cache_dir() / "graphs" / key


def _file_of(ref: str) -> str:
    return ref.encode().hex()


def _ref_of(stem: str) -> str:
    return bytes.fromhex(stem).decode()


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    t = tensor.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return memoryview(t.numpy()).cast("B")


@lru_cache(maxsize=1)
def cuvil_source_hash() -> str:
    root = Path(cuvil.__file__).parent
    h = hashlib.blake2b(digest_size=16)
    for path in sorted(root.rglob("*.py")):
        h.update(path.read_bytes())
    return h.hexdigest()


def _class_sources(model: torch.nn.Module) -> list[str]:
    """Hashes of the source files defining the model's module classes."""
    files = set()
    for m in model.modules():
        module = sys.modules.get(type(m).__module__)
        try:
            files.add(inspect.getsourcefile(module) if module else None)
        except TypeError:
            continue
    out = []
    for f in sorted(x for x in files if x):
        try:
            out.append(hashlib.blake2b(Path(f).read_bytes(), digest_size=16).hexdigest())
        except OSError:
            out.append(f)
    return out


def _rules_hash(rules: Any) -> str:
    """A hash of the rule sources' text, without parsing them."""
    from cuvil.dsl.diagnostics import Reporter
    from cuvil.rules.loader import read_sources

    h = hashlib.blake2b(digest_size=16)
    for path, text in read_sources(rules, Reporter()):
        h.update(f"{path}\x00{text}\x00".encode())
    return h.hexdigest()
