"""The whole pipeline, one named line per stage.

    torch.export / FX -> Cuvil IR -> egglog terms -> saturate -> extract -> lower -> runtime
                            ^ .cvr rules (cuvil/dsl) -> checked rules (cuvil/rules)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from cuvil.errors import CuvilError
from cuvil.ir.graph import Graph
from cuvil.trace import Tracer


def optimize(graph: Any, example_inputs: Sequence[Any] | None = None, *, rules: Any = None,
             target: str | Sequence[str] = "cpu", limits: Any = None,
             dynamic_shapes: Any = None, disable: Sequence[str] = (),
             trace: str | Path | None = None, extract: str = "auto") -> Graph:
    """The cheapest graph equal to `graph` under `rules`; `.report` says what happened."""
    from cuvil.egraph.optimizer import Options, optimize_graph
    from cuvil.rules import load

    tracer = Tracer()
    with tracer.stage("import"):
        graph = as_graph(graph, example_inputs, dynamic_shapes)
    library = load(rules, tracer).without(tuple(disable))
    options = Options(targets=_targets(target), limits=as_limits(limits), extract=extract,
                      hints=_hints(graph, example_inputs))
    result = optimize_graph(graph, library, options, tracer)
    if trace is not None:
        tracer.write(trace)
    return result


def compile(model: Any, example_inputs: Sequence[Any] | None = None, *, rules: Any = None,
            target: str | Sequence[str] = "cpu", dynamic_shapes: Any = None,
            fallback: bool = True, threads: int | None = None, limits: Any = None,
            disable: Sequence[str] = (), trace: str | Path | None = None,
            cache: bool = True, fuse_elementwise: bool = True):
    """`model` compiled to Numba kernels: a callable with the model's results, faster.

    With `cache`, a second compile of the same model (same code, weights, inputs, rules
    and options; in any process) reuses the optimized graph and the compiled kernels.
    """
    from cuvil import cache as compile_cache
    from cuvil.lower import compile_graph

    tracer = Tracer()
    options = {"rules": rules, "target": target, "dynamic_shapes": dynamic_shapes,
               "limits": limits, "disable": tuple(disable)}
    key = compile_cache.model_key(model, example_inputs, options) if cache else None
    with tracer.stage("cache lookup"):
        optimized = compile_cache.load(key, model) if key else None
    if optimized is None:
        optimized = optimize(model, example_inputs, rules=rules, target=target,
                             limits=limits, dynamic_shapes=dynamic_shapes, disable=disable)
        if key:
            compile_cache.store(key, optimized, model)
    with tracer.stage("lower"):
        compiled = compile_graph(optimized, target=_targets(target)[0], fallback=fallback,
                                 threads=threads, fuse_elementwise=fuse_elementwise)
    if trace is not None:
        tracer.write(trace)
    return compiled


def as_graph(model: Any, example_inputs: Sequence[Any] | None, dynamic_shapes: Any) -> Graph:
    if isinstance(model, Graph):
        return model
    from cuvil.frontend import from_torch

    return from_torch(model, example_inputs, dynamic_shapes=dynamic_shapes)


def as_limits(limits: Any):
    from cuvil.egraph.session import Limits

    if limits is None:
        return Limits()
    if isinstance(limits, Limits):
        return limits
    if isinstance(limits, dict):
        known = {f.name for f in fields(Limits)}
        unknown = set(limits) - known
        if unknown:
            raise CuvilError(f"unknown limit(s) {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(sorted(known))}")
        return Limits(**limits)
    raise CuvilError(f"limits must be a dict or cuvil Limits, not {type(limits).__name__}")


def _targets(target: str | Sequence[str]) -> tuple[str, ...]:
    names = (target,) if isinstance(target, str) else tuple(target)
    if not names:
        raise CuvilError("at least one target is needed")
    return names


def _hints(graph: Graph, example_inputs: Sequence[Any] | None) -> dict[str, int]:
    """Sizes of the symbolic dims in the example inputs: what the cost model assumes."""
    if not example_inputs:
        return {}
    from cuvil.ops.execute import bind_symbols

    try:
        params = [(n, graph[n].type) for n in graph.inputs]
        return bind_symbols(params, [tuple(x.shape) for x in example_inputs])
    except (CuvilError, AttributeError, ValueError):
        return {}
