"""The PyTorch frontend: a torch model in, a Cuvil graph and its import report out.

    graph = cuvil.from_torch(model, (x,))      # dim 0 of x becomes the symbolic dim `batch`
    print(graph.import_report)

Stages: `export` gets an aten-level FX graph (torch.export, with Cuvil's dynamic-shape
policy), `importer` walks it, mapping each aten op through the table in `aten`.
"""

from __future__ import annotations

from typing import Any

import torch

from cuvil.frontend.importer import Importer
from cuvil.frontend.report import ImportReport, Source
from cuvil.ir.graph import Graph


def from_torch(model: Any, example_inputs: Any = (), dynamic_shapes: Any = None,
               strict: bool = False) -> Graph:
    """Import `model` (an nn.Module, fx.GraphModule, ExportedProgram or `.pt2` path).

    `dynamic_shapes`: None makes dim 0 of the tensor inputs a symbolic `batch` dim (static,
    with a note in the report, if torch.export cannot); False is static; anything else is a
    torch.export spec whose `torch.export.Dim`s name the symbolic dims. Ops without a catalog
    entry run through torch (listed in `graph.import_report`); with `strict=True` they raise
    one `UnsupportedOpsError` listing them all with their source lines.
    """
    from cuvil.frontend.export import trace

    traced = trace(model, example_inputs, dynamic_shapes)
    with torch.no_grad():
        return Importer(traced).build(strict=strict)


__all__ = ["ImportReport", "Source", "from_torch"]
