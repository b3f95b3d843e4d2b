"""The optimizer: encode, saturate, extract, decode; one named line per stage.

    session = Session(graph, library, targets, limits)     # encode + first analysis
    run = saturate(session, limits)                        # every rule, all at once
    selection = extract(problem(session, costs), ...)      # cheapest equivalent DAG
    result = decode(...)                                   # back to Cuvil IR
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cuvil.egraph.cost import CostModel
from cuvil.egraph.decode import decode, origin_chain
from cuvil.egraph.extract import Candidate, Problem, Selection, exact, greedy_dag
from cuvil.egraph.report import Iteration, OptimizeReport, RuleStat
from cuvil.egraph.saturate import Saturation, saturate
from cuvil.egraph.session import Limits, Session
from cuvil.ir.graph import Graph
from cuvil.rules.library import RuleLibrary
from cuvil.trace import Tracer


@dataclass
class Options:
    targets: tuple[str, ...] = ("cpu",)
    limits: Limits = field(default_factory=Limits)
    extract: str = "auto"  # "greedy", "exact" or "auto" (exact when small)
    fold: bool = True
    hints: dict | None = None  # symbol -> size the cost model assumes


def cost_model(graph: Graph, library: RuleLibrary, options: Options) -> CostModel:
    targets = {name: dict(t.params) for name, t in library.targets.items()}
    return CostModel({**graph.defs, **library.ops}, dict(library.costs), targets,
                     dict(options.hints or {}))


def graph_cost(graph: Graph, costs: CostModel) -> float:
    return sum(costs.node_cost(n.op, n.attrs, [graph[i].type for i in n.inputs], n.type)
               for n in graph)


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
            op, attrs = typer.decode(node)
            ins = [typer.table.types[snap.ty[c]] for c in node.children]
            cost = costs.node_cost(op, attrs, ins, out)
            classes.setdefault(cls, []).append(Candidate(node_id, cls, cost, node.children))
    roots = [snap.let_class[session.encoding.handles[n]] for n in session.graph.outputs]
    return Problem(classes, list(dict.fromkeys(roots)))


def select(prob: Problem, options: Options) -> Selection:
    greedy = greedy_dag(prob)
    size = sum(len(c) for c in prob.classes.values())
    mode = options.extract
    if mode == "exact" or (mode == "auto" and size <= options.limits.exact_nodes):
        ilp = exact(prob, options.limits.exact_time)
        if ilp.cost <= greedy.cost + 1e-9:
            return ilp
        greedy.notes.append(f"ILP stopped at {ilp.cost:.2f} us, above greedy")
    return greedy


def optimize_graph(graph: Graph, library: RuleLibrary, options: Options,
                   tracer: Tracer | None = None) -> Graph:
    tracer = tracer or Tracer()
    costs = cost_model(graph, library, options)
    with tracer.stage("encode"):
        session = Session(graph, library, options.targets, options.limits, options.fold)
    with tracer.stage("saturate"):
        run = saturate(session, options.limits, tracer.step)
    with tracer.stage("extract"):
        selection = select(problem(session, costs), options)
    with tracer.stage("decode"):
        result = decode(graph, session.snapshot, session.typer, selection,
                        session.encoding.handles, session.folder.constants).verify()
    result.report = build_report(graph, result, session, run, selection, costs, tracer)
    return result


def build_report(before: Graph, after: Graph, session: Session, run: Saturation,
                 selection: Selection, costs: CostModel, tracer: Tracer) -> OptimizeReport:
    report = OptimizeReport(stop_reason=run.stop_reason, graph=after,
                            cost_before=graph_cost(before, costs),
                            cost_after=graph_cost(after, costs),
                            extraction=selection.method, gap=selection.gap,
                            nodes_before=len(before.ops()), nodes_after=len(after.ops()),
                            notes=list(selection.notes), timings=dict(tracer.totals))
    for rule in session.library.rules:
        report.rules.setdefault(rule.label, RuleStat(rule.label, rule.where, rule.description))
    for r in session.rules:
        report.rules.setdefault(r.label, RuleStat(r.label, r.where, ""))
    for k, step in enumerate(run.steps, start=1):
        report.iterations.append(Iteration(k, step.rulesets, step.size, step.seconds,
                                           sum(step.matches.values())))
        for label, n in step.matches.items():
            report.rules[label].matches += n
        for label in step.banned:
            report.rules[label].banned += 1
    for node in after:
        for label in node.origin:
            if label in report.rules:
                report.rules[label].in_result = True
    for rejected in session.typer.rejected.values():
        chain = " <- ".join(origin_chain(rejected.origin)) or "imported graph"
        report.rejected.append((chain, rejected.reason))
    return report
