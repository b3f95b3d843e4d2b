"""Cuvil: a compiler for PyTorch models in which every optimization is a rewrite rule.

    graph = cuvil.from_torch(model, example_inputs)     # torch.export -> Cuvil IR
    cuvil.run(graph, x)                                  # reference semantics
    best = cuvil.optimize(graph, rules="rules/")         # equality saturation + extraction
    fn = cuvil.compile(model, example_inputs)            # ... lowered to Numba kernels
    fn = cuvil.compile("model.onnx")                     # an ONNX model, the same way
    cuvil.register_target("cpu1", params={...})          # a target of your own
    cuvil.graph_dump(fn, "model.svg")                    # DOT/SVG coloured by latency
    torch.compile(model, backend="cuvil")                # Dynamo + AOTAutograd: cuvil.dynamo
    live = cuvil.Watch(rules=["stock", "my.cvr"]).compile(model, inputs)  # rules reloaded

Heavy modules (torch, egglog, numba) load on first use, so `cuvil --version` is instant.
"""

from __future__ import annotations

import importlib

from cuvil.errors import CuvilError, IRError, ShapeError, UnsupportedOpsError

__version__ = "0.1.0"

_LAZY = {
    "Graph": "cuvil.ir",
    "TensorType": "cuvil.ir",
    "DType": "cuvil.ir",
    "run": "cuvil.ops.execute",
    "from_torch": "cuvil.frontend",
    "from_onnx": "cuvil.onnx",
    "optimize": "cuvil.pipeline",
    "compile": "cuvil.pipeline",
    "register_target": "cuvil.lower.custom",
    "Quantize": "cuvil.quantize",
    "Watch": "cuvil.live",
    "graph_dump": "cuvil.dump",
    "zoo": "cuvil.zoo",
    "dynamo": "cuvil.dynamo",
}

__all__ = ["CuvilError", "IRError", "ShapeError", "UnsupportedOpsError", "__version__",
           *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'cuvil' has no attribute {name!r}")
    from cuvil import gc_pause

    with gc_pause.paused():  # imports make objects that live on (cuvil/gc_pause.py)
        if _LAZY[name] == "cuvil.ir":
            importlib.import_module("cuvil.ops")  # the catalog that types graph nodes
        module = importlib.import_module(_LAZY[name])
    value = module if name in ("zoo", "dynamo") else getattr(module, name)
    globals()[name] = value
    return value
