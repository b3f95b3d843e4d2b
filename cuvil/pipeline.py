"""The whole pipeline, one named line per stage.

    torch.export / FX -> Cuvil IR -> egglog terms -> saturate -> extract -> lower -> runtime
                            ^ .cvr rules (cuvil/dsl) -> checked rules (cuvil/library)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from cuvil import gc_pause
from cuvil.errors import CuvilError
from cuvil.options import CompileOptions
from cuvil.trace import Tracer

if TYPE_CHECKING:
    from cuvil.ir.graph import Graph


def optimize(graph: Any, example_inputs: Sequence[Any] | None = None, *, rules: Any = None,
             target: str | Sequence[str] = "cpu", limits: Any = None,
             dynamic_shapes: Any = None, disable: Sequence[str] = (),
             trace: str | Path | None = None, extract: str = "auto",
             quantize: Any = None, strategy: str = "latency", verify: bool = True) -> Graph:
    """The cheapest graph equal to `graph` under `rules`; `.report` says what happened.
    `strategy` says what cheapest is: one call's `"latency"`, or `"throughput"` of a stream
    of calls (`cuvil/egraph/strategy.py`). Rules not in the stock library are verified
    first (`cuvil/verify/gate.py`); `verify=False` uses them unverified."""
    options = CompileOptions.of(rules=rules, target=target, limits=limits, disable=disable,
                                dynamic_shapes=dynamic_shapes, extract=extract, trace=trace,
                                quantize=quantize, strategy=strategy, verify=verify,
                                cache=False)
    tracer = Tracer()
    checked = check_rules(options, tracer)
    with tracer.stage("import"):
        imported = as_graph(graph, example_inputs, dynamic_shapes)
    imported = calibrate(imported, options, tracer)
    result = optimize_imported(imported, options, _hints(imported, example_inputs), tracer)
    if result.report is not None:
        result.report.rule_check = checked
    _write_trace(tracer, trace)
    return result


def check_rules(options: CompileOptions, tracer: Tracer) -> str:
    """Verify the user rules of `options.rules` (unless `verify=False`); what the report
    says of them. A one-line `CuvilError` for a rule found unsound or that cannot be
    verified."""
    if options.rules is None:  # the stock library, verified by CI: nothing read
        return ""
    from cuvil.verify.gate import check_rules as gate

    return str(gate(options.rules, options.disable, options.verify, tracer))


def compile(model: Any, example_inputs: Sequence[Any] | None = None, *, rules: Any = None,
            target: str | Sequence[str] = "cpu", dynamic_shapes: Any = None,
            fallback: bool = True, threads: int | None = None, limits: Any = None,
            disable: Sequence[str] = (), trace: str | Path | None = None,
            cache: bool = True, fuse_elementwise: bool = True, quantize: Any = None,
            fallback_policy: str = "cpu", strategy: str = "latency", verify: bool = True):
    """`model` compiled to Numba kernels: a callable with the model's results, faster.
    `example_inputs`: a tuple of the model's arguments (or one tensor, its only one).

    With `cache`, compiling the same program again (same traced graph and constants, rules
    and options; in any process) reuses the optimized graph and the compiled kernels, and
    a model compiled before is rebuilt from its stored program (`cuvil/cache/programs.py`:
    no export, optimizer or lowering; `report.program_cache` says so). With
    `quantize` (a `cuvil.Quantize`), calibration facts let the int8 rules fire. With several
    targets (`["cuda", "cpu"]`) every node runs on the target of the device extraction
    placed it on; `fallback_policy="cpu"` runs a node its device has no kernel for on the
    CPU, with copies in and out (listed in the report), `"error"` refuses it. `strategy`
    and `verify` are `optimize`'s: user rules are verified before any cache can serve a
    program made with them.
    """
    from cuvil.frontend.training import refuse_training
    from cuvil.progress import compile_progress, display_name

    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    options = CompileOptions.of(
        rules=rules, target=target, dynamic_shapes=dynamic_shapes, fallback=fallback,
        threads=threads, limits=limits, disable=disable, fuse_elementwise=fuse_elementwise,
        quantize=quantize, fallback_policy=fallback_policy, strategy=strategy, verify=verify,
        cache=cache, trace=trace)
    tracer = Tracer()
    with gc_pause.paused(), compile_progress(tracer, display_name(model)):
        checked = check_rules(options, tracer)
        refuse_training(model)  # before the caches: a warm compile refuses it too
        key, compiled = _stored_program(model, example_inputs, options, tracer)
        imported = None
        if compiled is None:
            compiled, imported = build(model, example_inputs, options, tracer,
                                       key[1] if key else None)
            _store_program(key, compiled, imported, tracer)
    compiled.weights = weights_of(model, example_inputs, options, imported)
    compiled.report.rule_check = checked
    compiled.compile_trace = tracer  # a runtime trace merges these pass timings
    _write_trace(tracer, trace)
    return compiled


def build(model: Any, example_inputs: Any, options: CompileOptions, tracer: Tracer,
          fp=None):
    """The passes: import, calibrate, optimize, lower; (the compiled graph, the imported
    graph). `fp`: the model's fingerprint, if the program cache computed it already."""
    from cuvil.egraph.handoff import OptimizerAhead

    with OptimizerAhead(options.rules, options.disable) as ahead:
        from cuvil.runtime import compile_graph

        graph = import_model(model, example_inputs, options.dynamic_shapes, tracer,
                             options.cache, ahead.start, ahead.defer, fp)
        graph = calibrate(graph, options, tracer)
        hints = _hints(graph, example_inputs)
        optimized = optimize_imported(graph, options, hints, tracer, ahead)
        with tracer.stage("lower"):
            compiled = compile_graph(optimized, sizes=hints, **options.lowering())
    compiled.pricing = functools.partial(pricing_of, optimized, options, hints)
    return compiled, graph


def weights_of(model: Any, example_inputs: Any, options: CompileOptions, imported):
    """What `load_state_dict` swaps into (`runtime/swap.py`): a torch module's weights, for
    the CPU; None otherwise."""
    if not isinstance(model, torch.nn.Module) or not options.host_only:
        return None
    from cuvil.runtime.swap import Weights

    calibrated = options.quantize is not None and options.quantize.activations is not None
    return Weights(model.state_dict, imported.constants if imported else {},
                   functools.partial(_rebuild, model, example_inputs, options),
                   replay=not calibrated)


def _rebuild(model: Any, example_inputs: Any, options: CompileOptions, tensors: dict):
    """(the compiled graph, its imported constants) of a copy of `model` holding `tensors`,
    compiled with the caches off: every recipe recorded."""
    import copy
    import dataclasses

    twin = copy.deepcopy(model)
    twin.load_state_dict(tensors)
    compiled, imported = build(twin, example_inputs, dataclasses.replace(options, cache=False),
                               Tracer())
    return compiled, imported.constants


def _stored_program(model: Any, example_inputs: Any, options: CompileOptions, tracer: Tracer):
    """(the program cache's key, the compiled graph it holds under it), or None for
    either: the cache serves an `nn.Module` compiled for the CPU without quantization
    (`cuvil/cache/programs.py`)."""
    if not (options.cache and options.host_only and options.quantize is None
            and isinstance(model, torch.nn.Module)):
        return None, None
    from cuvil.cache import programs
    from cuvil.frontend.fingerprint import fingerprint
    from cuvil.runtime.threads import thread_count

    with tracer.stage("program cache"):
        try:
            fp = fingerprint(model, example_inputs, options.dynamic_shapes)
        except Exception:  # refused, or a model it did not foresee: the import cache says why
            return None, None
        threads = thread_count(options.threads)
        parts = programs.key(fp, options.rules, options.program_key(threads))

        def details():
            return build(model, example_inputs, options, Tracer())[0]

        compiled = programs.load(parts, fp.tensors, threads, details, fp.shapes)
    if compiled is not None:
        compiled.pricing = lambda: compiled.detailed().pricing()
    return (parts, fp), compiled


def _store_program(key, compiled, imported: Graph, tracer: Tracer) -> None:
    """Store the program where the import cache stored the model's graph: then the key
    says what the program is."""
    from cuvil.cache import programs
    from cuvil.cache.imports import program_storable

    if key is None or not program_storable(imported.import_report.cache):
        return

    with tracer.stage("program store"), gc_pause.resumed():
        programs.store(key[0], key[1].tensors, compiled)


def optimize_imported(graph: Graph, options: CompileOptions, hints: dict[str, int],
                      tracer: Tracer, ahead=None) -> Graph:
    """Stages parse, check, encode, saturate, extract, decode; or, with `options.cache`, one
    compile-cache lookup. `ahead`: an `egraph.handoff.OptimizerAhead` whose child, if
    started, does the optimizing."""
    from cuvil import cache as compile_cache

    graph = place(graph, options, tracer)
    key = None
    if options.cache:
        with tracer.stage("cache lookup"):
            key = compile_cache.key_of(graph, options.rules, options.optimizer_key(hints))
            hit = compile_cache.load(key, graph, functools.partial(_defs, options))
        if hit is not None:
            if hit.report is not None:  # the stages that ran: no optimizer stage
                hit.report.timings = dict(tracer.totals)
            if ahead is not None:
                ahead.cancel()  # an optimizer child started for nothing: end it before lowering
            return hit
    with gc_pause.resumed():  # the optimizer makes garbage at scale
        return _optimize_and_store(graph, options, hints, tracer, key, ahead)


def place(graph: Graph, options: CompileOptions, tracer: Tracer) -> Graph:
    """Stage place: with one device target that is not the host, `graph` on that device."""
    device = options.sole_device
    if device is None:
        return graph
    from cuvil.ir.place import place_on

    with tracer.stage("place"):
        return place_on(graph, device)


def _defs(options: CompileOptions) -> dict[str, Any]:
    """The composite ops of the rules, by name (a cached graph names those it uses)."""
    from cuvil.library import load

    return dict(load(options.rules).ops)


def _optimize_and_store(graph: Graph, options: CompileOptions, hints: dict[str, int],
                        tracer: Tracer, key, ahead) -> Graph:
    from cuvil import cache as compile_cache
    from cuvil.library import load

    def library():
        return load(options.rules, tracer).without(options.disable)

    pending = ahead.take(graph) if ahead is not None else None
    if pending is not None:  # forked before torch.export, egglog imported and rules loaded
        from cuvil.egraph.handoff import optimize_ahead

        result = optimize_ahead(pending, graph, library, options.optimizer(hints), tracer,
                                meanwhile=ahead.run_deferred)
    else:
        from cuvil.egraph.optimizer import optimize_graph  # egglog, scipy: on a miss

        meanwhile = ahead.run_deferred if ahead is not None else (lambda: None)
        result = optimize_graph(graph, library(), options.optimizer(hints), tracer, meanwhile)
    if key is not None and result.report is not None:
        result.report.cache = f"miss: {compile_cache.why_missed(key)}"
        with tracer.stage("cache store"):
            compile_cache.store(key, result, graph)
    return result


def pricing_of(graph: Graph, options: CompileOptions, hints: dict[str, int]):
    """(`graph`, the cost model extraction priced it with): a profile's predictions."""
    from cuvil.egraph.optimizer import cost_model
    from cuvil.library import load

    library = load(options.rules).without(options.disable)
    return graph, cost_model(graph, library, options.optimizer(hints))


def calibrate(graph: Graph, options: CompileOptions, tracer: Tracer) -> Graph:
    """`graph` with the calibration facts `options.quantize` observes (as it is without)."""
    if options.quantize is None:
        return graph
    from cuvil.quantize import Quantize

    if not isinstance(options.quantize, Quantize):
        raise CuvilError("quantize= takes a cuvil.Quantize, not "
                         f"{type(options.quantize).__name__}")
    with tracer.stage("calibrate"), gc_pause.resumed():
        return options.quantize.annotate(graph)


def _write_trace(tracer: Tracer, path: str | Path | None) -> None:
    if path is not None:
        tracer.write(path)


def import_model(model: Any, example_inputs: Sequence[Any] | None, dynamic_shapes: Any,
                 tracer: Tracer, cache: bool, before_export=None, defer=None,
                 fp=None) -> Graph:
    """Stage import: the model's Cuvil graph; with `cache`, through the import cache
    (`cuvil/cache/imports.py`, keyed on fingerprint `fp`, computed there if None), whose
    hit is stage "import (cached)". `before_export()` is called when torch.export is about
    to run; `defer(work)` may hold storing the import."""
    before_export = before_export or (lambda: None)
    if cache and isinstance(model, torch.nn.Module):
        from cuvil.cache.imports import import_model as cached_import

        return cached_import(model, example_inputs, dynamic_shapes, tracer, before_export,
                             defer, fp)
    if not _is_graph(model):
        before_export()
    with tracer.stage("import"), gc_pause.resumed():  # torch.export
        return as_graph(model, example_inputs, dynamic_shapes)


def as_graph(model: Any, example_inputs: Sequence[Any] | None, dynamic_shapes: Any) -> Graph:
    if _is_graph(model):
        return model
    from cuvil.onnx.load import is_onnx

    if is_onnx(model):  # a .onnx path or an onnx.ModelProto: the ONNX frontend
        from cuvil.onnx import from_onnx

        return from_onnx(model)
    from cuvil.frontend import from_torch

    return from_torch(model, example_inputs, dynamic_shapes=dynamic_shapes)


def _is_graph(model: Any) -> bool:
    from cuvil.ir.graph import Graph  # sympy: not on the program cache's warm path

    return isinstance(model, Graph)


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
