"""The whole pipeline: `compile` is one list of named passes, run in order.

    torch.export / FX -> Cuvil IR -> egglog terms -> saturate -> extract -> lower -> runtime
                            ^ .cvr rules (cuvil/dsl) -> checked rules (cuvil/library)

    PASSES = import -> calibrate -> place -> optimize -> lower -> build
    import = export -> functionalize -> convert          (`frontend.IMPORT`)

Each pass is a function from one value to the next (here a `Compilation`, `values.py`; in
the import stage an `Importing`, `cuvil/frontend/values.py`); `cuvil/passes.py` runs them
and times each under its name. Caches wrap stages (`caches.py`), each looked up by the key
of its input: the import cache wraps the import stage (`ImportCache`, keyed on the model's
fingerprint, which `fingerprinted` computes before the passes), the compile cache the
optimize pass (`OptimizedCache`, keyed on the imported graph), and the program cache the
whole list (`ProgramCache`, keyed on the fingerprint and the options): its hit runs no
pass. The import is one stage of three passes, not three stages, because its cache's hit
skips all three: torch.export captures the program (in-place ops kept), functionalize
makes it functional, convert makes it Cuvil IR, so the graph a cache stores is
functional. Storing an import waits while the optimizer's child, forked just before
torch.export, works (`OptimizerAhead.defer`).

The later stages' packages load their names on first use (`cuvil.runtime`, `cuvil.egraph`,
`cuvil.onnx`, `cuvil.library`): a warm compile (a program-cache hit) imports neither the
IR nor the optimizer nor the lowering.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from cuvil import egraph, gc_pause, runtime
from cuvil.cache.imports import recording
from cuvil.errors import CuvilError
from cuvil.frontend.training import refuse_training
from cuvil.lower import compile_targets
from cuvil.options import CompileOptions
from cuvil.passes import Pass, run
from cuvil.pipeline.caches import ImportCache, OptimizedCache, ProgramCache
from cuvil.pipeline.values import (
    Compilation,
    Request,
    as_graph,
    fingerprinted,
    hints_of,
    is_graph,
)
from cuvil.progress import compile_progress, display_name
from cuvil.runtime.swap import Weights
from cuvil.trace import Tracer

if TYPE_CHECKING:
    from cuvil.ir.graph import Graph


def import_(c: Compilation) -> Compilation:
    """The model's Cuvil graph (stage "import", `values.as_graph`: a torch model's through
    the frontend's passes, export -> functionalize -> convert). The optimizer's child is
    forked just before torch.export; the way the model's code goes under it is recorded
    for the import cache's check (`ImportCache.store`)."""
    r = c.request
    if c.ahead is not None and not is_graph(r.model):
        c.ahead.start()  # it imports egglog and loads the rules while torch.export runs
    with r.tracer.stage("import"), gc_pause.resumed(), recording(r.import_key) as path:
        graph = as_graph(r)  # torch.export makes garbage at scale
    return replace(c, graph=graph, hints=hints_of(graph, r.example_inputs), code_path=path)


def calibrate(c: Compilation) -> Compilation:
    """The graph with the calibration facts `options.quantize` observes (as it is without)."""
    quantize = c.request.options.quantize
    if quantize is None:
        return c
    from cuvil.quantize import Quantize  # 1.1 s (the IR, sympy): only to a quantized compile

    if not isinstance(quantize, Quantize):
        raise CuvilError(f"quantize= takes a cuvil.Quantize, not {type(quantize).__name__}")
    quantize.check_targets(c.request.options.targets)
    with c.request.tracer.stage("calibrate"), gc_pause.resumed():
        return replace(c, graph=quantize.annotate(c.graph))


def place(c: Compilation) -> Compilation:
    """With one device target that is not the host, the graph on that device
    (`cuvil/ir/place.py`): there is nothing for extraction to choose."""
    device = compile_targets.sole_device(c.request.options.targets)
    if device is None:
        return c
    from cuvil.ir.place import place_on  # the IR (sympy): past the caches

    with c.request.tracer.stage("place"):
        return replace(c, graph=place_on(c.graph, device))


def optimize_pass(c: Compilation) -> Compilation:
    """Stages parse, check, encode, saturate, extract, decode: in the optimizer's child
    forked ahead of torch.export (`egraph.handoff`) when there is one, else here. The
    cost model prices the symbolic dims at their example sizes and each device at its
    target's parameters; the report says whether `place` put every node on one device."""
    r, ahead, options = c.request, c.ahead, c.request.options
    params = compile_targets.device_costs(options.targets)
    with gc_pause.resumed():  # the optimizer makes garbage at scale
        pending = ahead.take(c.graph) if ahead is not None else None
        if pending is not None:  # forked before torch.export, egglog imported, rules loaded
            optimized = egraph.optimize_ahead(pending, c.graph, r.library, options, r.tracer,
                                              meanwhile=ahead.run_deferred, hints=c.hints,
                                              device_params=params)
        else:
            meanwhile = ahead.run_deferred if ahead is not None else (lambda: None)
            optimized = egraph.optimize_graph(c.graph, r.library(), options, r.tracer,
                                              meanwhile, hints=c.hints, device_params=params)
    if optimized.report is not None:
        optimized.report.placed_on = compile_targets.sole_device(options.targets) or ""
    return replace(c, optimized=optimized)


def lower(c: Compilation) -> Compilation:
    """The optimized graph's generated program (`runtime.Lowering`)."""
    o = c.request.options
    with c.request.tracer.stage("lower"):
        lowering = runtime.lower(c.optimized, target=o.targets, fallback=o.fallback,
                                 threads=o.threads, fuse_elementwise=o.fuse_elementwise,
                                 fallback_policy=o.fallback_policy, sizes=c.hints)
    return replace(c, lowering=lowering)


def build(c: Compilation) -> Compilation:
    """The program compiled by Numba into the callable (`runtime.build_program`)."""
    with c.request.tracer.stage("build"):
        compiled = runtime.build_program(c.lowering)
    compiled.pricing = c.pricing()
    return replace(c, compiled=compiled)


PASSES = (Pass("import", import_, ImportCache()), Pass("calibrate", calibrate),
          Pass("place", place), Pass("optimize", optimize_pass, OptimizedCache()),
          Pass("lower", lower), Pass("build", build))
OPTIMIZE = PASSES[:4]  # `optimize`'s: up to the optimized graph


def compile_passes(c: Compilation) -> Compilation:
    """`PASSES` in order, with the optimizer's child forked just before torch.export runs
    (it imports egglog and loads the rules meanwhile; a compile-cache hit ends it)."""
    options = c.request.options
    with egraph.OptimizerAhead(options.rules, options.disable) as ahead:
        return run(PASSES, replace(c, ahead=ahead), c.request.tracer)


PROGRAM = Pass("program", compile_passes, ProgramCache(compile_passes))  # a hit: no pass


def compile(model: Any, example_inputs: Sequence[Any] | None = None, *, rules: Any = None,
            target: str | Sequence[str] = "cpu", dynamic_shapes: Any = None,
            fallback: bool = True, threads: int | None = None, limits: Any = None,
            disable: Sequence[str] = (), trace: str | Path | None = None,
            cache: bool = True, fuse_elementwise: bool = True, quantize: Any = None,
            fallback_policy: str | None = None, strategy: str = "latency",
            verify: bool = True):
    """`model` compiled to Numba kernels: a callable with the model's results, faster.
    `example_inputs`: a tuple of the model's arguments (or one tensor, its only one).

    With `cache`, a program compiled before (same traced graph, constants, rules and
    options; in any process) is rebuilt from its stored program (`cuvil/cache/programs.py`;
    `report.program_cache` says so). `quantize` (a `cuvil.Quantize`) lets the int8 or fp16
    rules fire. `target`: the devices allowed; one device (`"cuda"`) runs every node there,
    several (`["cuda", "cpu"]`) let extraction place each node; an absent device is dropped
    with a warning, or, alone, is an error. `fallback_policy`: a node its device has no
    kernel for runs on the CPU with copies (`"cpu"`, listed in the report) or is refused
    (`"error"`, the default of one device target). `strategy` and `verify` are
    `optimize`'s: user rules are verified before any cache serves a program made with them.
    """
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    options = CompileOptions.of(
        rules=rules, target=target, dynamic_shapes=dynamic_shapes, fallback=fallback,
        threads=threads, limits=limits, disable=disable, fuse_elementwise=fuse_elementwise,
        quantize=quantize, fallback_policy=fallback_policy, strategy=strategy, verify=verify,
        cache=cache, trace=trace)
    options = compile_targets.present(compile_targets.checked(options))
    tracer = Tracer()
    with gc_pause.paused(), compile_progress(tracer, display_name(model)):
        checked = check_rules(options, tracer)
        refuse_training(model)  # before the caches: a warm compile refuses it too
        request = fingerprinted(Request(model, example_inputs, options, tracer))
        done = PROGRAM(Compilation(request))
    compiled = done.compiled
    compiled.weights = weights_of(done)
    compiled.report.rule_check = checked
    compiled.compile_trace = tracer  # a runtime trace merges these pass timings
    _write_trace(tracer, trace)
    return compiled


def optimize(graph: Any, example_inputs: Sequence[Any] | None = None, *, rules: Any = None,
             target: str | Sequence[str] = "cpu", limits: Any = None,
             dynamic_shapes: Any = None, disable: Sequence[str] = (),
             trace: str | Path | None = None, extract: str = "auto",
             quantize: Any = None, strategy: str = "latency", verify: bool = True) -> Graph:
    """The cheapest graph equal to `graph` under `rules`; `.report` says what happened.
    `strategy` says what cheapest is: one call's `"latency"`, or `"throughput"` of a stream
    of calls (`cuvil/egraph/strategy.py`). Rules not in the stock library are verified
    first (`cuvil/verify/gate.py`); `verify=False` uses them unverified. The passes are
    `compile`'s up to the optimized graph (`OPTIMIZE`), with no cache."""
    options = compile_targets.checked(CompileOptions.of(
        rules=rules, target=target, limits=limits, disable=disable,
        dynamic_shapes=dynamic_shapes, extract=extract, trace=trace, quantize=quantize,
        strategy=strategy, verify=verify, cache=False))
    tracer = Tracer()
    checked = check_rules(options, tracer)
    done = run(OPTIMIZE, Compilation(Request(graph, example_inputs, options, tracer)),
               tracer)
    result = done.optimized
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
    from cuvil.verify.gate import check_rules as gate  # 1.1 s (the verifier): user rules

    return str(gate(options.rules, options.disable, options.verify, tracer))


def weights_of(done: Compilation):
    """What `load_state_dict` swaps into (`runtime/swap.py`): a torch module's weights, for
    the CPU, rebuilt through `compile_passes` with the caches off; None otherwise."""
    r = done.request
    if not isinstance(r.model, torch.nn.Module) or \
            not compile_targets.host_only(r.options.targets):
        return None
    quantize = r.options.quantize
    calibrated = quantize is not None and quantize.activations is not None
    return Weights(r.model.state_dict, done.graph.constants if done.graph else {},
                   functools.partial(_rebuild, r.model, r.example_inputs, r.options),
                   replay=not calibrated)


def _rebuild(model: Any, example_inputs: Any, options: CompileOptions, tensors: dict):
    """(the compiled graph, its imported constants) of a copy of `model` holding
    `tensors`, compiled with the caches off: every recipe recorded."""
    twin = copy.deepcopy(model)
    twin.load_state_dict(tensors)
    request = Request(twin, example_inputs, replace(options, cache=False), Tracer())
    done = compile_passes(Compilation(request))
    return done.compiled, done.graph.constants


def _write_trace(tracer: Tracer, path: str | Path | None) -> None:
    if path is not None:
        tracer.write(path)
