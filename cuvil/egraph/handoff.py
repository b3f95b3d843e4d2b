"""The optimizer's child process and its parent: what crosses between them, and a child
forked ahead of the graph it will optimize.

`cuvil.compile` of a model it has not seen spends ~1.6 s in `torch.export`, on one core.
`OptimizerAhead.start` forks the optimizer's child before it: the child imports egglog,
Cuvil's e-graph modules and scipy's HiGHS and loads the rules (~1 s that followed the
export before) while the parent exports, then waits for the graph. Nothing here imports
egglog: the parent of an ahead-started child never does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from cuvil.egraph.report import OptimizeReport
from cuvil.egraph.worker import Outcome, Pending, Post, can_fork, prestart
from cuvil.ir.graph import Graph
from cuvil.library.checked import RuleLibrary
from cuvil.options import CompileOptions
from cuvil.trace import Tracer

AHEAD_MAX_BYTES = 256 << 20  # weights pickled to the child above this: fork it afterwards


def deadline_of(options: CompileOptions) -> float:
    return 1.2 * options.limits.time + 0.5


def pack(result: Graph, tracer: Tracer) -> tuple:
    """A picklable result: imported weights stay behind (the parent has them)."""
    slim = result.copy()
    slim.constants = {k: v for k, v in result.constants.items() if k.startswith("~")}
    slim.defs = {}
    report = result.report
    report.graph = None
    return slim, sorted(result.defs), report, tracer.events, tracer.totals


def result_of(outcome: Outcome, graph: Graph, library: RuleLibrary, tracer: Tracer) -> Graph:
    """The graph the child sent last (the input graph if none came in time)."""
    if outcome.payload is None:
        result = graph.copy()
        result.report = OptimizeReport(
            stop_reason=f"time limit (no result within {outcome.seconds:.1f} s; "
                        "returned the input graph)", graph=result)
        return result
    result = _unpack(outcome.payload, graph, library, tracer)
    if not outcome.finished:
        result.report.stop_reason = (f"time limit (worker stopped after "
                                     f"{outcome.seconds:.1f} s; best graph so far)")
    return result


def _unpack(payload: tuple, graph: Graph, library: RuleLibrary, tracer: Tracer) -> Graph:
    result, def_names, report, events, totals = payload
    for node in result:
        if node.op == "const" and node.attrs["ref"] in graph.constants:
            result.constants[node.attrs["ref"]] = graph.constants[node.attrs["ref"]]
    defs = {**graph.defs, **library.ops}
    result.defs = {name: defs[name] for name in def_names}
    report.graph = result
    result.report = report
    tracer.events += events
    for k, v in totals.items():
        tracer.totals[k] = tracer.totals.get(k, 0.0) + v
    report.timings = dict(tracer.totals)
    return result


@dataclass
class OptimizerAhead:
    """The optimizer's child for rules `rules` (less `disable`), forked by `start` ahead of
    its graph; `cancel` (or leaving the `with` block) ends a child never used."""

    rules: Any
    disable: tuple[str, ...] = ()
    pending: Pending | None = None
    deferred: list = field(default_factory=list)  # work for the parent while the child runs

    def defer(self, work) -> None:
        self.deferred.append(work)

    def run_deferred(self) -> None:
        while self.deferred:
            self.deferred.pop(0)()

    def start(self) -> None:
        if self.pending is None and can_fork():
            self.pending = prestart(functools.partial(_prepare, self.rules, self.disable))

    def take(self, graph: Graph) -> Pending | None:
        """The child, for `graph`; None (and the child ended) when there is none, or when
        pickling the graph's weights to it would cost more than it saves."""
        pending, self.pending = self.pending, None
        if pending is not None and sum(t.nbytes for t in graph.constants.values()) > \
                AHEAD_MAX_BYTES:
            pending.cancel()
            return None
        return pending

    def cancel(self) -> None:
        if self.pending is not None:
            self.pending.cancel()
            self.pending = None

    def __enter__(self) -> OptimizerAhead:
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        self.cancel()
        if kind is None:  # e.g. a cache hit: nothing ran the deferred work
            self.run_deferred()


def optimize_ahead(pending: Pending, graph: Graph, load_library, options: CompileOptions,
                   tracer: Tracer, meanwhile=lambda: None, *,
                   hints: dict[str, int] | None = None,
                   device_params: dict[str, dict] | None = None) -> Graph:
    """`optimizer.optimize_graph` in the ahead-started child; the parent does `meanwhile()`
    and loads the rules' definitions (`load_library()`) while the child optimizes."""
    try:
        pending.send((graph, _read_by_child(options), hints, device_params, tracer.origin))
        meanwhile()
        library = load_library()
        result = result_of(pending.collect(deadline_of(options)), graph, library, tracer)
    finally:
        pending.cancel()
    result.import_report, result.output_tree = graph.import_report, graph.output_tree
    result.dim_ranges = graph.dim_ranges
    return result


def _read_by_child(options: CompileOptions) -> CompileOptions:
    """`options` as far as the optimizer reads them (targets, limits, extraction, strategy):
    the rest (the rules the child loaded, calibration batches, `torch.export`'s dims) need
    not cross the pipe, and may not pickle."""
    return CompileOptions(targets=options.targets, limits=options.limits,
                          extract=options.extract, strategy=options.strategy)


def _prepare(rules: Any, disable: tuple[str, ...]):
    """In the child: import the optimizer (egglog) and HiGHS, load the rules."""
    import scipy.optimize  # noqa: F401 (HiGHS, for the exact extraction)

    from cuvil.egraph import optimizer  # noqa: F401 (egglog)
    from cuvil.library import load

    library = load(rules).without(disable)
    return functools.partial(_run, library)


def _run(library: RuleLibrary, data: tuple, post: Post) -> tuple:
    from cuvil.egraph.optimizer import cost_model, optimize_in_child

    graph, options, hints, device_params, origin = data
    costs = cost_model(graph, library, hints, device_params)
    return optimize_in_child(graph, library, options, costs, Tracer(origin=origin), post)
