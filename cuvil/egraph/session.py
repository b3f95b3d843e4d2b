"""One e-graph session: the egglog program for a graph and a rule library, run a step at a
time so that Cuvil can type new e-classes, fold constants and check limits in between.

Each rule lives in an egglog ruleset of its own, so that a step can run any set of rules
together (`unstable-combined-ruleset`) with a back-off scheduler per match limit: a rule
whose matches exceed its limit is not applied that step, sits out `ban_length` steps and
comes back with a doubled limit (exponential back-off, as in egg). A scheduler lives as
long as the session: egglog builds each rule's query in it once, and the query then looks
only at what is new since the rule's last run there (semi-naive), so a step that finds
nothing new costs next to nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from egglog import bindings

from cuvil.dsl import ast
from cuvil.egraph import snapshot as snapshots
from cuvil.egraph.encode import Encoding, constructors, encode_graph
from cuvil.egraph.fold import Folder
from cuvil.egraph.rewrites import EggRule, compile_rule, label_of, unfold_rule
from cuvil.egraph.snapshot import Snapshot
from cuvil.egraph.typer import Typer, TypeTable
from cuvil.errors import CuvilError
from cuvil.ir.graph import Graph
from cuvil.library.checked import RuleLibrary
from cuvil.ops import registry
from cuvil.options import Limits

UNFOLD = "cuvil:unfold"


@dataclass
class StepResult:
    rulesets: tuple[str, ...]
    size: int
    seconds: float
    changed: bool
    matches: dict[str, int]  # label -> matches applied this step
    banned: list[str]
    found: dict[str, int] = field(default_factory=dict)  # label -> matches found


@dataclass
class _Backoff:
    limit: int
    banned_until: int = -1
    times: int = 0


@dataclass
class Session:
    graph: Graph
    library: RuleLibrary
    targets: tuple[str, ...]
    limits: Limits
    fold: bool = True
    egraph: bindings.EGraph = field(init=False)
    rules: list[EggRule] = field(init=False)
    program: list[str] = field(init=False)
    step_count: int = 0

    def __post_init__(self):
        self.defs = {**self.graph.defs, **self.library.ops}
        self.ctors = constructors(self.defs, sorted(_variadic_arities(self.graph,
                                                                      self.library)))
        self.rules = self._compile_rules()
        uses = {u for r in self.rules for u in r.uses}
        dims = {d for r in self.rules for d in r.dims}
        self.typer = Typer(self.ctors.table, self.defs, TypeTable(uses, dims))
        self.folder = Folder(enabled=self.fold)
        self.backoff = {r.label: _Backoff(self.limits.match_limit) for r in self.rules}
        self.by_ruleset = self._group_rulesets()
        self._combined: dict[tuple[str, ...], str] = {}
        self._schedulers: set[int] = set()
        self.egraph = bindings.EGraph()
        self.encoding = self._encode()
        self.snapshot = self.sync()

    # -- building -------------------------------------------------------------------------
    def _compile_rules(self) -> list[EggRule]:
        out: list[EggRule] = []
        for k, rule in enumerate(self.library.rules):
            out += compile_rule(rule, f"r{k}", self.defs, self.targets)
        for k, opdef in enumerate(self.library.ops.values()):
            out.append(unfold_rule(opdef, f"u{k}", self.defs))
        return out

    def _group_rulesets(self) -> dict[str, list[str]]:
        """`.cvr` ruleset -> labels of its rules (unfold rules form their own group)."""
        compiled = {r.label for r in self.rules}  # a guard that is always false compiles to none
        groups: dict[str, list[str]] = {}
        for rule in self.library.rules:
            if rule.label in compiled:
                groups.setdefault(rule.ruleset, []).append(rule.label)
        groups[UNFOLD] = [r.label for r in self.rules if r.label.startswith("unfold:")]
        return {k: list(dict.fromkeys(v)) for k, v in groups.items()}

    def _encode(self) -> Encoding:
        t = self.typer
        for node in self.graph:
            if node.op in ("input", "const"):
                key = node.name if node.op == "input" else node.attrs["ref"]
                t.leaves[(node.op, key)] = node.type
        encoding = encode_graph(self.graph, t.table, self.graph.facts)
        rulesets = sorted({r.ruleset for r in self.rules})
        self.program = [self.ctors.declarations(), *(f"(ruleset {r})" for r in rulesets),
                        *(r.text for r in self.rules), *encoding.commands]
        try:
            self.run("\n".join(self.program))
        except bindings.EggSmolError as e:
            raise CuvilError(f"egglog rejected the generated program: {e}") from None
        return encoding

    def run(self, text: str) -> list:
        return self.egraph.parse_and_run_program(text)

    # -- stepping -------------------------------------------------------------------------
    def sync(self) -> Snapshot:
        """Type new e-classes and fold constants until nothing more changes."""
        for _ in range(8):
            snap = snapshots.take(self.egraph, set(self.ctors.table))
            commands = self.typer.sync(snap) + self.folder.sync(snap, self.typer)
            if not commands:
                return snap
            self.program += commands
            self.run("\n".join(commands))
        return snapshots.take(self.egraph, set(self.ctors.table))

    def step(self, rulesets: tuple[str, ...]) -> StepResult:
        """One iteration of the rules of `rulesets` (plus op unfolding), then a sync."""
        start = time.perf_counter()
        self.step_count += 1
        labels = [lb for rs in (*rulesets, UNFOLD) for lb in self.by_ruleset.get(rs, ())]
        active = [lb for lb in labels if self.backoff[lb].banned_until < self.step_count]
        groups: dict[int, list[str]] = {}
        for lb in active:
            groups.setdefault(self.backoff[lb].limit, []).append(lb)
        reports = self._run_groups(groups) if groups else []
        applied, found, banned = self._account(reports, active)
        updated = any(r.updated for r in reports)
        if updated:  # else the e-graph is as the last snapshot saw it
            self.snapshot = self.sync()
        sitting_out = len(active) < len(labels)
        changed = updated or bool(banned) or sitting_out  # banned rules have work left
        return StepResult(rulesets, self.snapshot.size, time.perf_counter() - start,
                          changed, applied, banned, found)

    def _run_groups(self, groups: dict[int, list[str]]) -> list:
        runs = []
        for limit, labels in sorted(groups.items()):
            rs = self._ruleset_for(tuple(sorted({r.ruleset for r in self.rules
                                                 if r.label in set(labels)})))
            runs.append(f"(run-with {self._scheduler(limit)} {rs})")
        command = f"(run-schedule (seq {' '.join(runs)}))"
        self.program.append(command)
        out = self.run(command)
        return [o.report for o in out if hasattr(o, "report")]

    def _scheduler(self, limit: int) -> str:
        """The back-off scheduler for match limit `limit`, made once per session: a
        scheduler builds each rule's query once and matches only what is new since the
        rule's last run in it (a scheduler made per step matched the whole e-graph again,
        6-8 ms a step on a 79-node graph). A rule it refuses is banned by `_account` and
        comes back with a doubled limit, in another scheduler, so each scheduler only ever
        admits or refuses at its own limit."""
        name = f"backoff{limit}"
        if limit not in self._schedulers:
            command = f"(let-scheduler {name} (back-off :match-limit {limit} :ban-length 1))"
            self.program.append(command)
            self.run(command)
            self._schedulers.add(limit)
        return name

    def _ruleset_for(self, members: tuple[str, ...]) -> str:
        if len(members) == 1:
            return members[0]
        if members not in self._combined:
            name = f"c{len(self._combined)}"
            command = f"(unstable-combined-ruleset {name} {' '.join(members)})"
            self.program.append(command)
            self.run(command)
            self._combined[members] = name
        return self._combined[members]

    def _account(self, reports: list, active: list[str]
                 ) -> tuple[dict[str, int], dict[str, int], list[str]]:
        applied: dict[str, int] = {}
        found: dict[str, int] = {}
        for report in reports:
            for name, n in report.num_matches_per_rule.items():
                applied[label_of(name)] = applied.get(label_of(name), 0) + n
            for it in report.iterations:
                for name, rrs in it.rule_set_report.rule_reports.items():
                    lb = label_of(name)
                    found[lb] = max(found.get(lb, 0), sum(r.num_matches for r in rrs))
        banned = []
        for lb in active:
            b = self.backoff[lb]
            if found.get(lb, 0) > b.limit and not applied.get(lb):
                b.banned_until = self.step_count + (self.limits.ban_length << b.times)
                b.times += 1
                b.limit *= 2
                banned.append(lb)
        return applied, found, banned


def _variadic_arities(graph: Graph, library: RuleLibrary) -> set[tuple[str, int]]:
    out = set()
    for node in graph:
        if node.op not in ("input",) and registry.get(node.op, graph.defs).variadic:
            out.add((node.op, len(node.inputs)))
    stack: list = [t for r in library.rules for t in (r.lhs, r.rhs)]
    while stack:
        term = stack.pop()
        if isinstance(term, ast.Call):
            opdef = registry.get(term.op, {**graph.defs, **library.ops})
            if opdef.variadic:
                out.add((term.op, len(term.args)))
            stack.extend(term.args)
    return out
