"""The import cache: a model's imported Cuvil graph, stored under what the model is, so
that a warm compile skips torch.export, and with it the import of torch._dynamo (over a
second of a warm compile's 2.5-3 s before this cache).

    key = fingerprint_of(model, inputs, dynamic_shapes)      # the request's, before the passes
    key, graph = lookup(key, model, tracer)                    # a hit skips the import stage
    with recording(key) as path:                               # a miss runs it:
        graph = from_torch(model, inputs, dynamic_shapes)      # torch.export runs the model
    store(key, graph, path, inputs, dynamic_shapes, tracer)    # (after, or while optimizing)

`cuvil/pipeline/caches.py`'s `ImportCache` wraps the compile's import stage with these,
as the compile cache wraps the optimize pass.

The key is `frontend.fingerprint`'s (a symbolic trace: the program, the leaf modules'
configurations, the tensors, the inputs, global state, the path of the model's own code)
with the format, Cuvil's source and torch's and Python's versions. The entry
(`imports/<key>.cvi` of `cuvil.disk_store`, `import_entry.py`) is the imported graph with
its constants bound to the live model's tensors on a hit.

A miss imports as usual (torch.export) and stores the graph only when export agreed with
the trace, so that the graph is a function of what the key covers:

- the model's own code went the same way under export as under the trace
  (`codepath.repeats`): nothing told a proxy from a tensor and chose differently;
- exporting the traced graph itself gives the same Cuvil graph (structure, constant
  names and every constant's bytes): the trace computes what the model computes.

A model keyed by a fake-tensor trace (torch.fx could not trace it) has no entry here: its
key vouches for the example shapes alone, and a graph here serves every shape. When its
code went the trace's way under export, the program cache stores its program
(`PROGRAM_ONLY`), which runs those shapes alone.

A model the fingerprint refuses (`NotCacheable`) is imported as usual, every time; the
import report says why (`graph.import_report.cache`).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from cuvil import gc_pause
from cuvil.cache.entry import Damaged
from cuvil.cache.key import digest
from cuvil.disk_store import IMPORTS
from cuvil.frontend.canonical import NotCacheable, tensor_digest
from cuvil.frontend.codepath import CodePath, Unavailable, repeats
from cuvil.frontend.fingerprint import Fingerprint, export_mode, fingerprint
from cuvil.paths import source_hash
from cuvil.trace import Tracer

if TYPE_CHECKING:
    from cuvil.ir.graph import Graph

FORMAT = 2
# the status of a model keyed by a fake trace (`frontend/fake_fingerprint.py`) whose code
# went the trace's way under export: no entry here, but the program cache stores it
PROGRAM_ONLY = "miss, program cache only"


def program_storable(status: str) -> bool:
    """Whether an import whose cache status is `status` lets the program cache store the
    program: the key says what the model is."""
    return status.startswith(("hit", "miss, stored", PROGRAM_ONLY))


@dataclass(frozen=True)
class Key:
    """The import cache's key for one model: its fingerprint and the key's parts; without
    a fingerprint, the import report's status saying why (`not used: ...`)."""

    fp: Fingerprint | None
    parts: dict[str, str] | None = None
    status: str = ""


def fingerprint_of(model: Any, example_inputs: Any, dynamic_shapes: Any) -> Key:
    """The key of `model` (`fingerprint`); a model it refuses has none, and its status
    says why."""
    try:
        fp = fingerprint(model, example_inputs, dynamic_shapes)
        return Key(fp, key_parts(fp))
    except (NotCacheable, Unavailable) as e:
        return Key(None, status=f"not used: {e}")
    except Exception as e:  # a model the fingerprint did not foresee: import as usual
        return Key(None, status=f"not used: {type(e).__name__}: {e}")


def lookup(key: Key, model: Any, tracer: Tracer) -> tuple[Key, Graph | None]:
    """(`key`, the graph stored under it with its constants bound to `model`'s tensors)
    (stage "import (cached)"), or (`key`, None) (stage "import key"); a key that fails to
    load is none."""
    start = time.perf_counter()
    found = None
    try:
        if key.fp is not None and key.fp.shapes is None:  # a fake trace's key: no entry here
            found = load(key.parts, model)
    except Exception as e:  # an entry the loader did not foresee: import as usual
        key = Key(None, status=f"not used: {type(e).__name__}: {e}")
    tracer.add("import (cached)" if found is not None else "import key", start,
               time.perf_counter() - start)
    if found is not None:
        found.import_report.cache = (f"hit (key {key_digest(key.parts)[:12]}): torch.export "
                                     "skipped")
    return key, found


@contextlib.contextmanager
def recording(key: Key | None):
    """The path of the model's own code while the block runs (torch.export runs it), for
    a model with a fingerprint; None without one, or where another thread records."""
    if key is None or key.fp is None:
        yield None
        return
    with contextlib.ExitStack() as stack:
        try:
            path = stack.enter_context(CodePath(key.fp.path.initial))
        except Unavailable:  # another thread records: import, and do not store
            path = None
        yield path


def store(key: Key, graph: Graph, path: CodePath | None, example_inputs: Any,
          dynamic_shapes: Any, tracer: Tracer) -> None:
    """Store `graph` under `key` when export agreed with the trace (stage "import store");
    the import report says what became of it."""
    if key.fp is None:
        graph.import_report.cache = key.status
        return
    with gc_pause.resumed(), tracer.stage("import store"):
        graph.import_report.cache = _store_checked(key.parts, key.fp, path, graph,
                                                   example_inputs, dynamic_shapes)


def key_parts(fp: Fingerprint) -> dict[str, str]:
    return {"format": str(FORMAT), "versions": versions(), **fp.parts}


def key_digest(parts: dict[str, str]) -> str:
    return digest(repr(sorted(parts.items())), 40)


@functools.cache
def versions() -> str:
    """Cuvil's source (the importer is in it), torch's version and Python's (the code
    path names bytecode offsets)."""
    return digest(f"{source_hash()} torch {torch.__version__} python {sys.version}")


def load(parts: dict[str, str], model: torch.nn.Module) -> Graph | None:
    def decoded(data: bytes) -> Graph:
        from cuvil.cache.import_entry import decode  # the IR, sympy

        return decode(data, parts, model)

    return IMPORTS.load(key_digest(parts), decoded,
                        (Damaged, ValueError, KeyError, TypeError, RuntimeError, AttributeError))


def _store_checked(parts, fp: Fingerprint, path: CodePath | None, graph: Graph,
                   example_inputs: Any, dynamic_shapes: Any) -> str:
    """Store `graph` if export agreed with the trace; the import report's status."""
    from cuvil.cache.import_entry import encode

    try:
        why = _disagreement(fp, path, graph, example_inputs, dynamic_shapes)
        if why is None and fp.shapes is not None:
            return f"{PROGRAM_ONLY} (key {key_digest(parts)[:12]})"
        data = encode(parts, graph, _bindings(graph, fp)) if why is None else b""
    except Exception as e:  # a constant or report the entry cannot hold: no entry
        why = f"{type(e).__name__}: {e}"
    if why is not None:
        return f"miss, not stored: {why}"
    IMPORTS.put(key_digest(parts), data)  # unless the cache is read-only
    return f"miss, stored (key {key_digest(parts)[:12]})"


def _disagreement(fp: Fingerprint, path: CodePath | None, graph: Graph,
                  example_inputs: Any, dynamic_shapes: Any) -> str | None:
    """Why `graph` may not be stored under `fp`'s key, or None."""
    if path is None:
        return "the model's code path could not be recorded"
    if not repeats(path, fp.path):
        return "the model's code went another way under torch.export than under the trace"
    if fp.shapes is not None:  # a fake trace: the program cache's key alone
        return None
    if graph.output_tree is not None or graph.defs or graph.facts:
        return "the model returns containers the entry cannot hold"
    if fp.leaf_root:  # one of torch's own modules: its configuration is all it reads
        return None
    from cuvil.frontend import from_torch

    try:
        with export_mode(fp.root):
            again = from_torch(fp.module(), example_inputs, dynamic_shapes=dynamic_shapes)
    except Exception as e:  # the traced graph does not export: then it is not the model
        return f"the traced graph does not import ({type(e).__name__})"
    if not same_program(graph, again, set(fp.tensors)):
        return "the traced graph imports to another program than the model"
    return None


def same_program(a: Graph, b: Graph, paths: set[str]) -> bool:
    """The same computation, constants included: by name where the name is a path in the
    model (`paths`), else by content (a constant the model makes, which export and the
    trace name differently)."""
    a, b = _by_content(a, paths), _by_content(b, paths)
    if a.structural_hash() != b.structural_hash() or set(a.constants) != set(b.constants):
        return False
    for ref, t in a.constants.items():
        u = b.constants[ref]
        if t.dtype != u.dtype or t.shape != u.shape or not torch.equal(t.detach().cpu(),
                                                                       u.detach().cpu()):
            return False
    return True


def _by_content(graph: Graph, paths: set[str]) -> Graph:
    """`graph` with each constant not at one of `paths` named by its dtype, shape and
    bytes."""
    renamed = graph.copy()
    renamed.constants = {}
    for node in graph:
        if node.op == "const":
            ref = node.attrs["ref"]
            t = graph.constants[ref]
            new = ref if ref in paths else f"{t.dtype}{list(t.shape)} {tensor_digest(t)}"
            renamed.replace_node(replace(node, attrs={**node.attrs, "ref": new}))
            renamed.constants[new] = t
    return renamed


def _bindings(graph: Graph, fp: Fingerprint) -> dict[str, list]:
    """How each constant of `graph` is found again (see import_entry)."""
    storages = {}
    for path, t in fp.tensors.items():
        if t.untyped_storage().nbytes():
            storages.setdefault((t.untyped_storage().data_ptr(), t.device, t.dtype), path)
    return {ref: _binding(ref, t, fp.tensors, storages) for ref, t in graph.constants.items()}


def _binding(ref: str, t: torch.Tensor, tensors: dict[str, torch.Tensor],
             storages: dict) -> list:
    """The model's tensor `t` is by its path, a view of one by the view, the transposed
    copy the importer makes of a weight (`fc.weight.T`) by the transpose; else stored."""
    if tensors.get(ref) is t:
        return ["path", ref]
    base = storages.get((t.untyped_storage().data_ptr(), t.device, t.dtype)) if \
        t.untyped_storage().nbytes() else None
    with torch.no_grad():
        if base is not None and torch.equal(
                tensors[base].as_strided(t.shape, t.stride(), t.storage_offset()), t):
            return ["view", base, t.storage_offset(), list(t.shape), list(t.stride())]
        source = tensors.get(ref.removesuffix(".T"))
        if ref.endswith(".T") and source is not None and source.dtype == t.dtype:
            for d0 in range(source.dim()):
                for d1 in range(d0 + 1, source.dim()):
                    turned = source.transpose(d0, d1)
                    if turned.shape == t.shape and torch.equal(turned, t):
                        return ["transpose", ref.removesuffix(".T"), d0, d1]
    return ["bytes"]


def entry_path(parts: dict[str, str]) -> Path:
    return IMPORTS.path(key_digest(parts))
