"""The ONNX frontend: an `.onnx` file (or an `onnx.ModelProto`) in, a Cuvil graph out.

    graph = cuvil.onnx.from_onnx("model.onnx")   # dim_params become symbolic dims
    compiled = cuvil.compile("model.onnx")       # the same import, then the pipeline
    cuvil.onnx.to_onnx(cuvil.optimize(model, inputs), "out.onnx")  # and back out

Stages: `load` reads and checks the file (one-line errors for a malformed file or an opset
older than Cuvil reads), `importer` walks the graph, `fold` computes shape arithmetic at
import, `ops` and `ops_shape` map each ONNX op onto catalog ops. The way out: `export`
writes a Cuvil graph as an ONNX model, `export_ops` has each catalog op's ONNX form.

Names load on first use: `cuvil.compile` asks `is_onnx` of every model, and the importer
and exporter bring the IR (sympy, ~0.4 s) that a warm compile never needs.
"""

from __future__ import annotations

__all__ = ["MIN_OPSET", "from_onnx", "is_onnx", "read_model", "to_onnx"]


def __getattr__(name: str):
    if name == "to_onnx":
        from cuvil.onnx.export import to_onnx as value
    elif name == "from_onnx":
        from cuvil.onnx.importer import from_onnx as value
    elif name in ("MIN_OPSET", "is_onnx", "read_model"):
        from cuvil.onnx import load

        value = getattr(load, name)
    else:
        raise AttributeError(f"module 'cuvil.onnx' has no attribute {name!r}")
    globals()[name] = value
    return value
