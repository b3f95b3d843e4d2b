"""One cache entry as bytes: the optimized graph's text, its report as JSON and the
constants the optimizer made, in a safetensors file (`tensor_entry`). No pickles: an
entry from a shared cache is data.

    header: {"parts": ..., "graph": "graph mlp(...) {...}", "defs": [...],
             "report": {...}, "shared": [...]}
    tensors: the made constants, by ref

Imported constants are not stored (`shared`): they come, by reference, from the fresh
import, whose bytes the key proved equal. Composite ops come back by name from the rules.
`decode` checks the entry (`tensor_entry.unpack`: `Corrupt` when damaged) and the key
before anything is used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any

from cuvil.cache.tensor_entry import pack, unpack
from cuvil.errors import CuvilError

if TYPE_CHECKING:
    from cuvil.cache.key import Key
    from cuvil.ir.graph import Graph

FORMAT = "cuvil-graph 4"


class Damaged(CuvilError):
    """An entry of another key, or one that fails its own structure."""


def encode(key: Key, optimized: Graph, imported: Graph) -> bytes:
    shared = imported_refs(optimized, imported)
    made = {ref: t for ref, t in optimized.constants.items() if ref not in shared}
    header = {"parts": key.parts, "name": key.name, "graph": optimized.to_text(),
              "defs": sorted(optimized.defs), "shared": shared,
              "report": report_json(optimized.report)}
    return pack(FORMAT, header, made)


def imported_refs(optimized: Graph, imported: Graph) -> list[str]:
    """The optimized graph's constants that are the import's own tensors (the others, the
    optimizer made)."""
    return sorted(ref for ref, t in optimized.constants.items()
                  if imported.constants.get(ref) is t)


def decode(data: bytes, key: Key, imported: Graph,
           defs: Callable[[], dict[str, Any]]) -> Graph:
    """The graph in `data`, its constants from `imported` and the entry; its composite ops
    by name from `defs()` (called only when the graph uses some)."""
    header, made = unpack(FORMAT, data)
    if header["parts"] != key.parts:
        raise Damaged("another key")
    constants = {ref: imported.constants[ref] for ref in header["shared"]}
    constants.update(made)
    from cuvil.ir.graph import Graph  # sympy: only on a hit of this cache

    graph = Graph.from_text(header["graph"], constants)
    known = defs() if header["defs"] else {}
    graph.defs = {name: known[name] for name in header["defs"]}
    graph.report = report_of(header["report"])
    return graph


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
    data["precision"] = [PrecisionChoice(**{**p, "low": Alternative(**p["low"]), "fp32":
                                            Alternative(**p["fp32"]) if p["fp32"] else None})
                         for p in data.get("precision", ()) if "low" in p]
    data["rules"] = {label: RuleStat(**stat) for label, stat in data["rules"].items()}
    data["iterations"] = [Iteration(**{**it, "rulesets": tuple(it["rulesets"])})
                          for it in data["iterations"]]
    data["rejected"] = [tuple(r) for r in data["rejected"]]
    return OptimizeReport(**data)
