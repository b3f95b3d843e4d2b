"""Cuvil: a compiler for PyTorch models in which every optimization is a rewrite rule.

    graph = cuvil.from_torch(model, example_inputs)     # torch.export -> Cuvil IR
    cuvil.run(graph, x)                                  # reference semantics
    best = cuvil.optimize(graph, rules="rules/")         # equality saturation + extraction
    fn = cuvil.compile(model, example_inputs)            # ... lowered to Numba kernels
    net = cuvil.compile(model, example_inputs, training=True)  # forward and backward
    fn = cuvil.compile("model.onnx")                     # an ONNX model, the same way
    cuvil.register_target("cpu1", params={...})          # a target of your own
    cuvil.graph_dump(fn, "model.svg")                    # DOT/SVG coloured by latency
    torch.compile(model, backend="cuvil")                # Dynamo + AOTAutograd: cuvil.dynamo
    live = cuvil.Watch(rules=["stock", "my.cvr"]).compile(model, inputs)  # rules reloaded

Heavy modules (torch, egglog, numba) load on first use, so `cuvil --version` is instant.
"""

from __future__ import annotations

from cuvil.errors import CuvilError, IRError, ShapeError, UnsupportedOpsError

__version__ = "0.1.0"

_LAZY = ("Graph", "TensorType", "DType", "run", "from_torch", "from_onnx", "optimize",
         "compile", "register_target", "Quantize", "Watch", "graph_dump", "zoo", "dynamo")

__all__ = ["CuvilError", "IRError", "ShapeError", "UnsupportedOpsError", "__version__",
           *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'cuvil' has no attribute {name!r}")
    from cuvil import gc_pause

    with gc_pause.paused():  # imports make objects that live on (cuvil/gc_pause.py)
        value = _load(name)
    globals()[name] = value
    return value


def _load(name: str):
    """The public name `name`, imported from its home (`import cuvil.x`, never
    `from cuvil import x`: that would ask this module's `__getattr__` for `x`)."""
    if name in ("Graph", "TensorType", "DType"):
        import cuvil.ir
        import cuvil.ops.registry  # noqa: F401  (installs the catalog that types graph nodes)

        return getattr(cuvil.ir, name)
    if name == "optimize":
        import cuvil.pipeline

        return cuvil.pipeline.optimize
    if name == "compile":
        return _compile_with_training()
    if name == "zoo":
        import cuvil.zoo

        return cuvil.zoo
    if name == "dynamo":
        import cuvil.dynamo

        return cuvil.dynamo
    return _load_function(name)


def _load_function(name: str):
    if name == "run":
        from cuvil.ops.execute import run

        return run
    if name == "from_torch":
        from cuvil.frontend import from_torch

        return from_torch
    if name == "from_onnx":
        from cuvil.onnx import from_onnx

        return from_onnx
    if name == "register_target":
        from cuvil.lower.custom import register_target

        return register_target
    if name == "Quantize":
        from cuvil.quantize import Quantize

        return Quantize
    if name == "Watch":
        from cuvil.live import Watch

        return Watch
    from cuvil.dump import graph_dump

    return graph_dump


def _compile_with_training():
    """`cuvil.pipeline.compile`, which with `training=True` compiles a module to train
    instead (`cuvil.dynamo.training`, loaded only then: TorchDynamo's import is heavy)."""
    import inspect

    import cuvil.pipeline

    inference = cuvil.pipeline.compile

    def compile(model, example_inputs=None, *, training: bool = False, **options):
        if training:
            from cuvil.dynamo.training import compile_for_training

            return compile_for_training(model, example_inputs, **options)
        return inference(model, example_inputs, **options)

    signature = inspect.signature(inference)
    flag = inspect.Parameter("training", inspect.Parameter.KEYWORD_ONLY, default=False,
                             annotation="bool")
    compile.__signature__ = signature.replace(parameters=[*signature.parameters.values(),
                                                          flag])
    compile.__doc__ = f"""{inference.__doc__}
    `training=True`: a module to train instead (an `nn.Module` whose parameters are
    `model`'s), its forward and backward graphs compiled by Cuvil through TorchDynamo and
    AOTAutograd (`cuvil/dynamo/training.py`)."""
    compile.__module__ = "cuvil"
    return compile
