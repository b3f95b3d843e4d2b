"""The compile cache's key: what the program is, in six parts a miss can name.

    program    the graph's structural hash: ops, attributes (scalars included), types with
               their symbolic dims, every input and the output structure
    constants  the dtype, shape and bytes of every constant the graph holds
    calibration  what calibration observed of the values (`cuvil.Quantize`), if it ran
    rules      the text of every rule file
    options    targets and their cost parameters, limits, extraction mode, disabled rules,
               the dim sizes costs assume
    versions   Cuvil's source and stock rules, torch, egglog, numba

The key is computed from the imported graph, after export, never from the model object:
whatever export reads (a Python attribute, the training flag, a branch on either) is in
the graph or its constants.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from cuvil.paths import source_hash as cuvil_source_hash

if TYPE_CHECKING:
    import torch

    from cuvil.ir.graph import Graph

FORMAT = 4  # the key of an entry in the safetensors format


@dataclass(frozen=True)
class Key:
    name: str  # the graph's name, said in a miss's explanation
    parts: dict[str, str]
    # the model's identity: its name and its constants' refs, dtypes and shapes (not their
    # values); a miss is compared only with the last compile of the same identity
    identity: str = ""

    @property
    def digest(self) -> str:
        return digest(json.dumps(self.parts, sort_keys=True), 40)


def key_of(graph: Graph, rules: Any, options: dict[str, Any]) -> Key:
    """The key of optimizing the imported `graph` with `rules` and `options`."""
    parts = {"format": str(FORMAT), "versions": versions(),
             "program": graph.structural_hash(), "constants": constants_hash(graph),
             "calibration": digest(json.dumps(graph.facts, sort_keys=True)) if graph.facts
             else "none",
             "rules": rules_hash(rules), "options": digest(repr(sorted(options.items())))}
    identity = digest(f"{graph.name}\x00{constants_hash(graph, False)}", 24)
    return Key(graph.name, parts, identity)


def any_values(key: Key, graph: Graph) -> Key:
    """`key` with the constants' values left out (their refs, dtypes and shapes kept). The
    optimizer reads no tensor's values (guards see scalars, which are attributes, and
    constness); only folding does. So an optimized graph that made no constant of its own
    serves every version of the model that differs in weights alone."""
    return Key(key.name, {**key.parts, "constants": "any values " + constants_hash(graph, False)},
               key.identity)


def constants_hash(graph: Graph, values: bool = True) -> str:
    """SHA-256 over the ref, dtype, shape and (with `values`) bytes of each constant node,
    in graph order."""
    h = hashlib.sha256()
    for node in graph:
        if node.op == "const":
            tensor = graph.constants[node.attrs["ref"]]
            h.update(f"{node.attrs['ref']}:{tuple(tensor.shape)}:{tensor.dtype}\x00".encode())
            if values:
                h.update(tensor_bytes(tensor))
    return h.hexdigest()


def rules_hash(rules: Any) -> str:
    """A hash of the rule sources' paths and text, without parsing them."""
    from cuvil.dsl.sources import sources_hash

    return sources_hash(rules)


@lru_cache(maxsize=1)
def versions() -> str:
    """Cuvil's source, and the versions of the libraries an optimized graph depends on."""
    from importlib import metadata  # here, as torch: `cuvil --help` imports this module

    import torch

    return digest(f"{cuvil_source_hash()} torch {torch.__version__} "
                  f"egglog {metadata.version('egglog')} numba {metadata.version('numba')}")


@lru_cache(maxsize=1)
def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    import torch  # here, so that `cuvil cache info` never imports torch

    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy())


def digest(data: str | bytes, size: int = 64) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()[:size]
