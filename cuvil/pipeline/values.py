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

from cuvil import egraph, frontend, gc_pause, library
from cuvil import onnx as onnx_frontend
from cuvil.cache import imports as import_cache
from cuvil.errors import CuvilError
from cuvil.frontend.fingerprint import Fingerprint, fingerprint
from cuvil.options import CompileOptions
from cuvil.trace import Tracer

if TYPE_CHECKING:
    from cuvil.egraph.handoff import OptimizerAhead
    from cuvil.ir.graph import Graph
    from cuvil.runtime import CompiledGraph, Lowering


@dataclass(frozen=True)
class Request:
    """A model, its example inputs and the options it is compiled with; the tracer its
    stages are timed in; its fingerprint when the program cache computed it."""

    model: Any
    example_inputs: Sequence[Any] | None
    options: CompileOptions
    tracer: Tracer
    fp: Fingerprint | None = None

    @property
    def program_cached(self) -> bool:
        """Whether the program cache serves this request: an `nn.Module` compiled for the
        CPU without quantization (`cuvil/cache/programs.py`)."""
        return (self.options.cache and self.options.host_only and self.options.quantize is None
                and isinstance(self.model, torch.nn.Module))

    def library(self):
        """The rules, less the disabled ones."""
        return library.load(self.options.rules, self.tracer).without(self.options.disable)


@dataclass(frozen=True)
class Compilation:
    """A request and what the passes made of it so far."""

    request: Request
    ahead: OptimizerAhead | None = None  # the optimizer's child, forked ahead of export
    graph: Graph | None = None  # imported (import), then calibrated (calibrate)
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
    return graph, egraph.cost_model(graph, rules, options.optimizer(hints))


def fingerprinted(request: Request) -> Request:
    """`request` with the model's fingerprint, where the program cache serves it (stage
    "program cache"); as it is where the fingerprint refuses the model (the import cache
    says why)."""
    if not request.program_cached:
        return request
    with request.tracer.stage("program cache"):
        try:
            fp = fingerprint(request.model, request.example_inputs,
                             request.options.dynamic_shapes)
        except Exception:  # refused, or a model it did not foresee: the import cache says why
            return request
    return replace(request, fp=fp)


def import_graph(request: Request, before_export: Callable[[], None] | None,
                 defer: Callable | None) -> Graph:
    """The model's Cuvil graph; with `options.cache`, through the import cache
    (`cuvil/cache/imports.py`, keyed on the request's fingerprint, computed there if
    None), whose hit is stage "import (cached)". `before_export()` is called when
    torch.export is about to run; `defer(work)` may hold storing the import."""
    model, options = request.model, request.options
    before_export = before_export or (lambda: None)
    if options.cache and isinstance(model, torch.nn.Module):
        return import_cache.import_model(model, request.example_inputs,
                                         options.dynamic_shapes, request.tracer,
                                         before_export, defer, request.fp)
    if not _is_graph(model):
        before_export()
    with request.tracer.stage("import"), gc_pause.resumed():  # torch.export
        return as_graph(model, request.example_inputs, options.dynamic_shapes)


def as_graph(model: Any, example_inputs: Sequence[Any] | None, dynamic_shapes: Any) -> Graph:
    """`model` as a Cuvil graph: a graph itself, an ONNX model, or a torch model."""
    if _is_graph(model):
        return model
    if onnx_frontend.is_onnx(model):  # a .onnx path or an onnx.ModelProto
        return onnx_frontend.from_onnx(model)
    return frontend.from_torch(model, example_inputs, dynamic_shapes=dynamic_shapes)


def _is_graph(model: Any) -> bool:
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

