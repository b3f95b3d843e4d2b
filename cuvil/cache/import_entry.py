"""One import-cache entry as bytes: the imported graph's text, its import report, and how
each of its constants is found again, in a safetensors file (`tensor_entry`). No pickles,
like `entry.py`.

    header: {"parts": ..., "graph": "graph MLP(...) {...}", "order": [...], "counter": 8,
             "report": {...}, "constants": {ref: binding}}
    tensors: the constants stored, by ref

A constant is bound, on a hit, to the live model's own tensor: `["path", "fc.weight"]`
(a parameter, buffer or tensor attribute the key covers, by its path in the model), or
`["view", path, offset, shape, strides]` (a view of one, such as a bias reshaped to
broadcast), or `["transpose", path, d0, d1]` (the transposed copy of a weight the importer
makes for `matmul`); only what the import computed otherwise (a folded constant) is
stored, as `["bytes"]`. `decode` checks the entry (`Corrupt` when damaged) and the key,
and that every tensor found has the dtype and shape its `const` node says.
"""

from __future__ import annotations

from typing import Any

import torch

from cuvil.cache.entry import Damaged
from cuvil.cache.tensor_entry import pack, unpack
from cuvil.frontend.report import ImportReport, Source
from cuvil.ir.graph import Graph
from cuvil.ir.types import DType

FORMAT = "cuvil-import 3"


def encode(parts: dict[str, str], graph: Graph, bindings: dict[str, list]) -> bytes:
    """The entry for `graph`; `bindings` say where each constant is found again
    (`["bytes"]` for one to store)."""
    stored = {ref: graph.constants[ref] for ref, b in bindings.items() if b[0] == "bytes"}
    header = {"parts": parts, "graph": graph.to_text(), "order": list(graph.nodes),
              "counter": graph._counter, "report": report_json(graph.import_report),
              "ranges": {d: list(r) for d, r in graph.dim_ranges.items()},
              "constants": {ref: b[:1] if b[0] == "bytes" else b
                            for ref, b in sorted(bindings.items())}}
    return pack(FORMAT, header, stored)


def decode(data: bytes, parts: dict[str, str], model: torch.nn.Module) -> Graph:
    """The graph in `data`, its constants bound to `model`'s tensors and the entry's."""
    header, stored = unpack(FORMAT, data)
    if header["parts"] != parts:
        raise Damaged("another key")
    constants = {ref: stored[ref] if binding[0] == "bytes" else _bound(binding, model)
                 for ref, binding in header["constants"].items()}
    graph = Graph.from_text(header["graph"], constants)
    if sorted(header["order"]) != sorted(graph.nodes) or set(constants) != set(graph.constants):
        raise Damaged("nodes or constants")
    graph.nodes = {name: graph.nodes[name] for name in header["order"]}
    for node in graph:
        if node.op == "const":
            t = graph.constants[node.attrs["ref"]]
            if tuple(t.shape) != node.type.shape or DType.from_torch(t.dtype) != node.type.dtype:
                raise Damaged(f"constant {node.attrs['ref']} is not {node.type}")
    graph._counter = header["counter"]
    graph.import_report = report_of(header["report"])
    graph.dim_ranges = {d: tuple(r) for d, r in header["ranges"].items()}
    return graph


def _bound(binding: list, model: torch.nn.Module) -> torch.Tensor:
    kind = binding[0]
    tensor = find(model, binding[1])
    if kind == "path":
        return tensor
    with torch.no_grad():  # as the importer makes them: detached
        if kind == "view":
            offset, shape, strides = binding[2:]
            return tensor.detach().as_strided(shape, strides, offset)
        if kind == "transpose":
            return tensor.detach().transpose(binding[2], binding[3]).contiguous()
    raise Damaged(f"binding {kind!r}")


def find(model: torch.nn.Module, path: str) -> torch.Tensor:
    """The tensor at `path` (`block.fc.weight`) in `model`."""
    value: Any = model
    for part in path.split("."):
        value = getattr(value, part, None)
    if not isinstance(value, torch.Tensor):
        raise Damaged(f"no tensor at {path}")
    return value


def report_json(report: ImportReport) -> dict[str, Any]:
    return {"model": report.model, "dynamic_dims": report.dynamic_dims,
            "fallbacks": [[op, src.where, src.code] for op, src in report.fallbacks],
            "notes": report.notes, "nodes": report.nodes}


def report_of(data: dict[str, Any]) -> ImportReport:
    return ImportReport(data["model"], dict(data["dynamic_dims"]),
                        [(op, Source(where, code)) for op, where, code in data["fallbacks"]],
                        list(data["notes"]), data["nodes"])
