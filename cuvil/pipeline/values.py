"""What the passes hand on: a `Request` (what `compile` was asked) and a `Compilation` (the
request and what each pass made of it), both frozen; a pass returns a new `Compilation`.

    c = Compilation(fingerprinted(Request(model, inputs, options, tracer)))
    c.graph -> c.optimized -> c.lowering -> c.compiled      # import, optimize, lower, build
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

from cuvil import egraph, frontend, library
from cuvil import onnx as onnx_frontend
from cuvil.cache import imports as import_cache
from cuvil.errors import CuvilError
from cuvil.lower import compile_targets
from cuvil.options import CompileOptions
from cuvil.trace import Tracer

if TYPE_CHECKING:
    from cuvil.egraph.handoff import OptimizerAhead
    from cuvil.frontend.codepath import CodePath
    from cuvil.frontend.fingerprint import Fingerprint
    from cuvil.ir.graph import Graph
    from cuvil.runtime import CompiledGraph, Lowering


@dataclass(frozen=True)
class Request:
    """A model, its example inputs and the options it is compiled with; the tracer its
    stages are timed in; the import cache's key (the model's fingerprint) where a cache
    keys on it (`fingerprinted`)."""

    model: Any
    example_inputs: Sequence[Any] | None
    options: CompileOptions
    tracer: Tracer
    import_key: import_cache.Key | None = None

    @property
    def fp(self) -> Fingerprint | None:
        """The model's fingerprint: None where no cache keys on it, or it refused the model."""
        return None if self.import_key is None else self.import_key.fp

    @property
    def import_cached(self) -> bool:
        """Whether the import cache serves this request: an `nn.Module`, with
        `options.cache`."""
        return self.options.cache and isinstance(self.model, torch.nn.Module)

    @property
    def program_cached(self) -> bool:
        """Whether the program cache serves this request: an `nn.Module` compiled for the
        CPU without quantization (`cuvil/cache/programs.py`)."""
        return (self.options.cache and compile_targets.host_only(self.options.targets)
                and self.options.quantize is None and isinstance(self.model, torch.nn.Module))

    def library(self):
        """The rules, less the disabled ones."""
        return library.load(self.options.rules, self.tracer).without(self.options.disable)


@dataclass(frozen=True)
class Compilation:
    """A request and what the passes made of it so far."""

    request: Request
    ahead: OptimizerAhead | None = None  # the optimizer's child, forked ahead of export
    graph: Graph | None = None  # imported (import), then calibrated (calibrate)
    code_path: CodePath | None = None  # the model's code's way under torch.export (import)
    hints: dict[str, int] = field(default_factory=dict)  # the symbolic dims' example sizes
    optimized: Graph | None = None  # optimize
    lowering: Lowering | None = None  # lower
    compiled: CompiledGraph | None = None  # build, or the program cache

    def pricing(self) -> Callable[[], tuple]:
        """What a profile's predictions ask for: (the optimized graph, the cost model
        extraction priced it with), holding the optimized graph alone."""
        return functools.partial(pricing_of, self.optimized, self.request.options,
                                 self.hints)


def pricing_of(graph: Graph, options: CompileOptions, hints: dict[str, int]):
    """(`graph`, the cost model extraction priced it with)."""
    rules = library.load(options.rules).without(options.disable)
    return graph, egraph.cost_model(graph, rules, hints,
                                    compile_targets.device_costs(options.targets))


def fingerprinted(request: Request) -> Request:
    """`request` with the import cache's key (the model's fingerprint, in stage "program
    cache" where the program cache keys on it too, else "import key"), where the import
    cache serves it; a model the fingerprint refuses has a key that says why."""
    if not request.import_cached:
        return request
    with request.tracer.stage("program cache" if request.program_cached else "import key"):
        key = import_cache.fingerprint_of(request.model, request.example_inputs,
                                          request.options.dynamic_shapes)
    return replace(request, import_key=key)


def as_graph(request: Request) -> Graph:
    """The request's model as a Cuvil graph: a graph itself, an ONNX model's (`cuvil.onnx`),
    a torch model's through the frontend's passes (`frontend.IMPORT`)."""
    model = request.model
    if is_graph(model):
        return model
    if onnx_frontend.is_onnx(model):  # a .onnx path or an onnx.ModelProto
        return onnx_frontend.from_onnx(model)
    importing = frontend.Importing(model, request.example_inputs,
                                   request.options.dynamic_shapes)
    return frontend.import_passes(importing, request.tracer).graph


def is_graph(model: Any) -> bool:
    from cuvil.ir.graph import Graph  # sympy, 0.4 s: not on the program cache's warm path

    return isinstance(model, Graph)


def hints_of(graph: Graph, example_inputs: Sequence[Any] | None) -> dict[str, int]:
    """Sizes of the symbolic dims in the example inputs: what the cost model assumes."""
    if not example_inputs:
        return {}
    from cuvil.ops.execute import bind_symbols  # the op catalog, 1.1 s: past the caches

    try:
        params = [(n, graph[n].type) for n in graph.inputs]
        return bind_symbols(params, [tuple(x.shape) for x in example_inputs])
    except (CuvilError, AttributeError, ValueError):
        return {}

