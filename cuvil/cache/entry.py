"""One cache entry as bytes: the optimized graph's text, its report as JSON and the raw bytes
of the constants the optimizer made. No pickles: an entry from a shared cache is data.

    CUVIL-GRAPH 3 <sha256 of everything after this line>
    {"parts": ..., "graph": "graph mlp(...) {...}", "defs": [...], "report": {...},
     "shared": [...], "made": {ref: [dtype, shape, offset, length]}}
    <the made constants' bytes, one after another>

Imported constants are not stored (`shared`): they come, by reference, from the fresh
import, whose bytes the key proved equal. Composite ops come back by name from the rules.
`decode` checks the checksum and the key before anything is used.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cuvil.cache.key import Key, digest, tensor_bytes
from cuvil.errors import CuvilError

if TYPE_CHECKING:
    import torch

    from cuvil.ir.graph import Graph

MAGIC = b"CUVIL-GRAPH"
VERSION = b"3"


class Damaged(CuvilError):
    """An entry that fails its checksum, its key or its own structure."""


def read_entry(path: Path, decode: Callable[[bytes], Any], errors) -> Any:
    """`decode` of the file at `path`; None when it is missing, or when `decode` raises one
    of `errors` (the compile's store writes it again). A hit refreshes the file's time,
    which eviction reads as its last use."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        found = decode(data)
    except errors:
        return None
    with contextlib.suppress(OSError):
        os.utime(path)
    return found


def encode(key: Key, optimized: Graph, imported: Graph) -> bytes:
    shared = imported_refs(optimized, imported)
    made, blobs, offset = {}, [], 0
    for ref, tensor in sorted(optimized.constants.items()):
        if ref not in shared:
            data = bytes(tensor_bytes(tensor))
            made[ref] = [str(tensor.dtype).removeprefix("torch."), list(tensor.shape),
                         offset, len(data)]
            blobs.append(data)
            offset += len(data)
    header = {"parts": key.parts, "name": key.name, "graph": optimized.to_text(),
              "defs": sorted(optimized.defs), "shared": shared, "made": made,
              "report": report_json(optimized.report)}
    body = json.dumps(header, sort_keys=True).encode() + b"\n" + b"".join(blobs)
    return MAGIC + b" " + VERSION + b" " + digest(body).encode() + b"\n" + body


def imported_refs(optimized: Graph, imported: Graph) -> list[str]:
    """The optimized graph's constants that are the import's own tensors (the others, the
    optimizer made)."""
    return sorted(ref for ref, t in optimized.constants.items()
                  if imported.constants.get(ref) is t)


def decode(data: bytes, key: Key, imported: Graph,
           defs: Callable[[], dict[str, Any]]) -> Graph:
    """The graph in `data`, its constants from `imported` and the entry; its composite ops
    by name from `defs()` (called only when the graph uses some)."""
    head, _, body = data.partition(b"\n")
    if head.split(b" ") != [MAGIC, VERSION, digest(body).encode()]:
        raise Damaged("checksum or format")
    text, _, blob = body.partition(b"\n")
    header = json.loads(text)
    if header["parts"] != key.parts:
        raise Damaged("another key")
    constants = {ref: imported.constants[ref] for ref in header["shared"]}
    for ref, (dtype, shape, offset, length) in header["made"].items():
        raw = bytearray(blob[offset:offset + length])
        constants[ref] = _tensor(raw, dtype, shape)
    from cuvil.ir.graph import Graph  # sympy: only on a hit of this cache

    graph = Graph.from_text(header["graph"], constants)
    known = defs() if header["defs"] else {}
    graph.defs = {name: known[name] for name in header["defs"]}
    graph.report = report_of(header["report"])
    return graph


def _tensor(raw: bytearray, name: str, shape: list[int]) -> torch.Tensor:
    import torch  # here, so that `cuvil cache info` never imports torch

    dtype = getattr(torch, name)
    if not raw:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(shape)


def report_json(report: Any) -> dict | None:
    if report is None:
        return None
    data = {f.name: getattr(report, f.name) for f in fields(report) if f.name != "graph"}
    data["rules"] = {label: asdict(stat) for label, stat in report.rules.items()}
    data["iterations"] = [asdict(it) for it in report.iterations]
    data["precision"] = [asdict(p) for p in report.precision]
    return data


def report_of(data: dict | None):
    if data is None:
        return None
    from cuvil.egraph.precision import Alternative, PrecisionChoice
    from cuvil.egraph.report import Iteration, OptimizeReport, RuleStat

    data = dict(data)
    data["precision"] = [PrecisionChoice(**{**p, "int8": Alternative(**p["int8"]), "fp32":
                                            Alternative(**p["fp32"]) if p["fp32"] else None})
                         for p in data.get("precision", ())]
    data["rules"] = {label: RuleStat(**stat) for label, stat in data["rules"].items()}
    data["iterations"] = [Iteration(**{**it, "rulesets": tuple(it["rulesets"])})
                          for it in data["iterations"]]
    data["rejected"] = [tuple(r) for r in data["rejected"]]
    return OptimizeReport(**data)
