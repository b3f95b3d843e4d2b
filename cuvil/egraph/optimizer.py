"""The optimizer: encode, saturate, extract, decode; one named line per stage.

    session = Session(graph, library, targets, limits)     # encode + first analysis
    run = saturate(session, limits)                        # every rule, all at once
    selection = extract(problem(session, costs), ...)      # cheapest equivalent DAG
    result = decode(...)                                   # back to Cuvil IR
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from cuvil.egraph.cost import CostModel
from cuvil.egraph.decode import decode, origin_chain
from cuvil.egraph.extract import (
    Candidate,
    Problem,
    Selection,
    exact,
    greedy_dag,
    greedy_tree,
)
from cuvil.egraph.handoff import deadline_of, pack, result_of
from cuvil.egraph.precision import precision_choices
from cuvil.egraph.report import Iteration, OptimizeReport, RuleStat
from cuvil.egraph.saturate import Saturation, saturate
from cuvil.egraph.session import Session
from cuvil.egraph.strategy import resource, select_throughput
from cuvil.egraph.worker import Post, can_fork, run_isolated
from cuvil.ir.devices import HOST
from cuvil.ir.graph import Graph
from cuvil.library.checked import RuleLibrary
from cuvil.options import CompileOptions
from cuvil.trace import Tracer

TIE_BREAK = 1e-6  # us added to rewritten e-nodes
CONSTANT_LEAVES = ("const", "scalar")


def cost_model(graph: Graph, library: RuleLibrary, hints: dict[str, int] | None = None,
               device_params: dict[str, dict] | None = None) -> CostModel:
    """The cost model of `graph` under `library`: `hints`, the symbolic dims' sizes it
    assumes; `device_params`, target name -> cost parameters of the compile's targets
    (`cuvil/lower/compile_targets.py`; the registered devices' own without them)."""
    targets = {name: dict(t.params) for name, t in library.targets.items()}
    return CostModel({**graph.defs, **library.ops}, dict(library.costs), targets,
                     dict(hints or {}), dict(device_params or {}))


def graph_cost(graph: Graph, costs: CostModel) -> float:
    total = 0.0
    for n in graph:
        if n.op == "to_device" and graph[n.inputs[0]].op in CONSTANT_LEAVES:
            total += costs.upload_cost(n.type)
        else:
            total += costs.node_cost(n.op, n.attrs, [graph[i].type for i in n.inputs], n.type)
    return total


def problem(session: Session, costs: CostModel) -> Problem:
    snap, typer = session.snapshot, session.typer
    classes: dict[str, list[Candidate]] = {}
    for cls, node_ids in snap.classes.items():
        if cls not in snap.ty:
            continue
        out = typer.table.types[snap.ty[cls]]
        for node_id in node_ids:
            node = snap.nodes[node_id]
            if node.key in typer.rejected or not all(c in snap.ty for c in node.children):
                continue
            cost, where = _enode_cost(session, costs, node, out)
            classes.setdefault(cls, []).append(Candidate(node_id, cls, cost, node.children,
                                                         where))
    roots = [snap.let_class[session.encoding.handles[n]] for n in session.graph.outputs]
    return Problem(classes, list(dict.fromkeys(roots)))


def _enode_cost(session: Session, costs: CostModel, node, out) -> tuple[float, str]:
    """(an e-node's cost per call, the resource it keeps busy): nothing when it is folded
    at compile time, the amortized upload when it moves a constant to a device (copied
    once, when the graph is built)."""
    snap, typer, constant = session.snapshot, session.typer, session.folder.constant
    if session.folder.foldable(node, out, typer):
        return 0.0, out.device  # computed once, at compile time
    op, attrs = typer.decode(node)
    ins = [typer.table.types[snap.ty[c]] for c in node.children]
    if op == "to_device" and out.device != HOST and all(c in constant for c in node.children):
        cost = costs.upload_cost(out)
    else:
        cost = costs.node_cost(op, attrs, ins, out)
    if snap.origin.get(node.key, '""') != '""':
        cost += TIE_BREAK  # equal costs keep the imported node
    return cost, resource(op, ins, out)


def select(prob: Problem, options: CompileOptions, seconds_left: float) -> Selection:
    """The cheapest extraction under `options.strategy` (`cuvil/egraph/strategy.py`)."""
    chosen = _select_latency(prob, options, seconds_left)
    if options.strategy != "throughput":
        return chosen
    size = sum(len(c) for c in prob.classes.values())
    seconds = max(0.1, min(options.limits.exact_time, seconds_left))
    return select_throughput(prob, chosen, size, options.extract, options.limits.exact_nodes,
                             seconds)


def _select_latency(prob: Problem, options: CompileOptions,
                    seconds_left: float) -> Selection:
    size = sum(len(c) for c in prob.classes.values())
    if size > options.limits.dag_nodes:
        tree = greedy_tree(prob)
        tree.notes.append(f"{size} e-nodes: tree-cost extraction (DAG-aware up to "
                          f"{options.limits.dag_nodes})")
        return tree
    greedy = greedy_dag(prob)
    mode = options.extract
    if mode == "exact" or (mode == "auto" and size <= options.limits.exact_nodes):
        ilp = exact(prob, max(0.1, min(options.limits.exact_time, seconds_left)))
        if ilp.cost <= greedy.cost + 1e-9:
            return ilp
        greedy.notes.append(f"ILP stopped at {ilp.cost:.2f} us, above greedy")
    return greedy


def optimize_graph(graph: Graph, library: RuleLibrary, options: CompileOptions,
                   tracer: Tracer | None = None, meanwhile=lambda: None, *,
                   hints: dict[str, int] | None = None,
                   device_params: dict[str, dict] | None = None) -> Graph:
    """Optimize in a forked worker when possible (a runaway never hangs the caller), the
    caller doing `meanwhile()` while it works (first, without a worker). `hints` and
    `device_params`: what the cost model prices with (`cost_model`)."""
    tracer = tracer or Tracer()
    costs = cost_model(graph, library, hints, device_params)
    if can_fork():
        result = _isolated(graph, library, options, costs, tracer, meanwhile)
    else:
        meanwhile()
        result = _optimize(graph, library, options, costs, tracer)
    result.import_report, result.output_tree = graph.import_report, graph.output_tree
    result.dim_ranges = graph.dim_ranges
    return result


def _optimize(graph: Graph, library: RuleLibrary, options: CompileOptions, costs: CostModel,
              tracer: Tracer, post: Post | None = None) -> Graph:
    start = time.perf_counter()
    with tracer.stage("encode"):
        session = Session(graph, library, options.targets, options.limits)
    on_step = _Interim(session, costs, options, tracer, post) if post else tracer.step
    with tracer.stage("saturate"):
        run = saturate(session, options.limits, start, on_step)
    with tracer.stage("extract"):
        left = 0.9 * options.limits.time - (time.perf_counter() - start)
        selection = select(problem(session, costs), options, left)
    return _finish(graph, session, run, selection, costs, tracer)


def _finish(graph: Graph, session: Session, run: Saturation, selection: Selection,
            costs: CostModel, tracer: Tracer) -> Graph:
    with tracer.stage("decode"):
        result = decode(graph, session, selection).verify()
    result.report = build_report(graph, result, session, run, selection, costs, tracer)
    return result


@dataclass
class _Interim:
    """After each step, now and then, post the best graph so far to the parent."""

    session: Session
    costs: CostModel
    options: CompileOptions
    tracer: Tracer
    post: Post
    steps: list = field(default_factory=list)
    last: float = field(default_factory=time.perf_counter)

    def __call__(self, step) -> None:
        self.tracer.step(step)
        self.steps.append(step)
        interval = max(0.5, self.options.limits.time / 5)
        if time.perf_counter() - self.last < interval:
            return
        self.last = time.perf_counter()
        run = Saturation(list(self.steps), "time limit (best graph found before the deadline)")
        prob = problem(self.session, self.costs)
        size = sum(len(c) for c in prob.classes.values())
        fast = greedy_tree if size > self.options.limits.dag_nodes else greedy_dag
        selection = fast(prob)
        result = _finish(self.session.graph, self.session, run, selection, self.costs,
                         Tracer())
        self.post(pack(result, self.tracer))


def _isolated(graph: Graph, library: RuleLibrary, options: CompileOptions, costs: CostModel,
              tracer: Tracer, meanwhile) -> Graph:
    def work(post: Post):
        return optimize_in_child(graph, library, options, costs, Tracer(origin=tracer.origin),
                                 post)

    outcome = run_isolated(work, deadline_of(options), meanwhile)
    return result_of(outcome, graph, library, tracer)


def optimize_in_child(graph: Graph, library: RuleLibrary, options: CompileOptions,
                      costs: CostModel, tracer: Tracer, post: Post) -> tuple:
    """In the optimizer's child: the result, packed for the parent (`handoff.pack`)."""
    return pack(_optimize(graph, library, options, costs, tracer, post), tracer)


def build_report(before: Graph, after: Graph, session: Session, run: Saturation,
                 selection: Selection, costs: CostModel, tracer: Tracer) -> OptimizeReport:
    report = OptimizeReport(stop_reason=run.stop_reason, graph=after,
                            cost_before=graph_cost(before, costs),
                            cost_after=graph_cost(after, costs),
                            extraction=selection.method, gap=selection.gap,
                            nodes_before=len(before.ops()), nodes_after=len(after.ops()),
                            notes=list(selection.notes), timings=dict(tracer.totals),
                            egglog="\n".join(session.program) + "\n")
    for rule in session.library.rules:
        report.rules.setdefault(rule.label, RuleStat(rule.label, rule.where, rule.description))
    for r in session.rules:
        report.rules.setdefault(r.label, RuleStat(r.label, r.where, ""))
    for k, step in enumerate(run.steps, start=1):
        report.iterations.append(Iteration(k, step.rulesets, step.size, step.seconds,
                                           sum(step.matches.values())))
        for label, n in step.matches.items():
            report.rules[label].matches += n
        for label, n in step.found.items():
            report.rules[label].found += n
        for label in step.banned:
            report.rules[label].banned += 1
    for node in after:
        for label in node.origin:
            if label in report.rules:
                report.rules[label].in_result = True
    for cls, label in session.snapshot.fired:  # rules that only remove nodes
        if cls in selection.choice and label in report.rules:
            report.rules[label].in_result = True
    for rejected in session.typer.rejected.values():
        chain = " <- ".join(origin_chain(rejected.origin)) or "imported graph"
        report.rejected.append((chain, rejected.reason))
    report.precision = precision_choices(session, selection, costs)
    return report
