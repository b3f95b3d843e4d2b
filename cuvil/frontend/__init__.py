"""The PyTorch frontend: a torch model in, a Cuvil graph and its import report out.

    graph = cuvil.from_torch(model, (x,))      # dim 0 of x becomes the symbolic dim `batch`
    print(graph.import_report)

Stages: `export` gets an aten-level FX graph (torch.export, with Cuvil's dynamic-shape
policy; a model in training mode that depends on it is refused, `training`), `functional`
replaces its in-place ops by functional ones (a write into an input becomes the graph's
`mutations`), `importer` walks it, mapping each aten op through the table in `aten`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

from cuvil.errors import CuvilError, UnsupportedOpsError

if TYPE_CHECKING:
    from cuvil.frontend.report import ImportReport, Source
    from cuvil.ir.graph import Graph


def from_torch(model: Any, example_inputs: Any = (), dynamic_shapes: Any = None,
               strict: bool = False) -> Graph:
    """Import `model` (an nn.Module, a function, fx.GraphModule, ExportedProgram or `.pt2`
    path).

    `dynamic_shapes`: None makes dim 0 of the tensor inputs a symbolic `batch` dim and dim 1
    of rank-2 integer inputs (token ids, masks) a `seq` dim where the model allows (static,
    with a note in the report, if torch.export cannot; an import that fails under symbolic
    dims is retried static, and the report says so); False is static; anything else is a
    torch.export spec whose `torch.export.Dim`s name the symbolic dims. Ops without a catalog
    entry run through torch (listed in `graph.import_report`); with `strict=True` they raise
    one `UnsupportedOpsError` listing them all with their source lines.
    """
    from cuvil.frontend.export import trace
    from cuvil.frontend.importer import Importer  # the IR, sympy: only when importing

    traced = trace(model, example_inputs, dynamic_shapes)
    try:
        with torch.no_grad():
            return Importer(traced).build(strict=strict)
    except UnsupportedOpsError:
        raise
    except CuvilError as e:
        if dynamic_shapes is not None or not traced.dim_names or \
                isinstance(model, str | os.PathLike | torch.export.ExportedProgram):
            raise
        reason = str(e)
    traced = trace(model, example_inputs, False)  # the default policy: retry static
    traced.notes.append(f"import with symbolic dims failed, imported static: {reason}")
    with torch.no_grad():
        return Importer(traced).build(strict=strict)


def __getattr__(name: str):
    if name in ("ImportReport", "Source"):  # the fingerprint's package stays free of the IR
        from cuvil.frontend import report

        return getattr(report, name)
    raise AttributeError(f"module 'cuvil.frontend' has no attribute {name!r}")


__all__ = ["ImportReport", "Source", "from_torch"]
