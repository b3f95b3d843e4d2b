"""The PyTorch frontend: a torch model in, a Cuvil graph and its import report out, by
three named passes, each a function from one `Importing` (`values.py`) to the next.

    graph = cuvil.from_torch(model, (x,))      # dim 0 of x becomes the symbolic dim `batch`
    print(graph.import_report)

    IMPORT = export -> functionalize -> convert

`export` captures the program (`export.py`: torch.export with Cuvil's dynamic-shape
policy, a `.pt2` file, an ExportedProgram; a model in training mode that depends on it is
refused, `training`), in-place ops kept. `functionalize` replaces them by functional ones
(`functional.py`: a write into an input becomes the graph's `mutations`). `convert` walks
the functional FX graph into Cuvil IR (`importer`, each aten op through the table in
`aten`). `cuvil.compile` runs the three as its `import` stage, which the import cache
wraps (`cuvil/pipeline`): one stage, since the cache's hit skips all three.

An import under the symbolic dims the default policy chose that fails past export is
retried static, once (`import_passes`): the passes run again with static shapes, and the
report says which failed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from cuvil.errors import CuvilError, UnsupportedOpsError
from cuvil.frontend.values import Importing
from cuvil.passes import Pass, run
from cuvil.trace import Tracer

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
    request = Importing(model, example_inputs, dynamic_shapes, strict)
    return import_passes(request, Tracer()).graph


def export_pass(value: Importing) -> Importing:
    """The captured program (`export.export`), in-place ops kept."""
    from cuvil.frontend.export import export

    exported = export(value.model, value.example_inputs, value.dynamic_shapes)
    if value.retry_note is not None:
        exported.notes.append(value.retry_note)
    return replace(value, exported=exported)


def functionalize_pass(value: Importing) -> Importing:
    """The functional FX graph (`functional.functionalize`): no op writes in place."""
    from cuvil.frontend.functional import functionalize

    return replace(value, traced=functionalize(value.exported))


def convert_pass(value: Importing) -> Importing:
    """The Cuvil graph and its import report (`importer.Importer`)."""
    from cuvil.frontend.importer import Importer  # the IR, sympy: only when importing

    with torch.no_grad():
        return replace(value, graph=Importer(value.traced).build(strict=value.strict))


IMPORT = (Pass("export", export_pass), Pass("functionalize", functionalize_pass),
          Pass("convert", convert_pass))
# why a pass that failed under the default policy's symbolic dims runs again, static
RETRY_NOTES = {"functionalize": "the batch dim could not stay dynamic, imported static: {}",
               "convert": "import with symbolic dims failed, imported static: {}"}


def import_passes(value: Importing, tracer: Tracer) -> Importing:
    """`IMPORT` in order, each timed under its name. A pass past export that fails under
    the symbolic dims the default policy chose runs the list once more, static."""
    for step in IMPORT:
        try:
            value = run((step,), value, tracer)
        except CuvilError as e:
            static = static_retry(value, step.name, e)
            if static is None:
                raise
            return run(IMPORT, static, tracer)
    return value


def static_retry(value: Importing, failed: str, error: CuvilError) -> Importing | None:
    """The static import of `value`, whose pass `failed` raised `error`, noting why; None
    where that would not help: export failed (the policy's fallbacks ran already), strict
    mode refused ops, or the dims were not the default policy's."""
    exported = value.exported
    if failed not in RETRY_NOTES or isinstance(error, UnsupportedOpsError) or \
            value.dynamic_shapes is not None or exported is None or not exported.dim_names:
        return None
    return Importing(value.model, value.example_inputs, False, value.strict,
                     RETRY_NOTES[failed].format(error))


def __getattr__(name: str):
    if name in ("ImportReport", "Source"):  # the fingerprint's package stays free of the IR
        from cuvil.frontend import report

        return getattr(report, name)
    raise AttributeError(f"module 'cuvil.frontend' has no attribute {name!r}")


__all__ = ["IMPORT", "ImportReport", "Importing", "Source", "from_torch", "import_passes"]
