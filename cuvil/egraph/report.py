"""What an optimization did and why: the report attached to every optimized graph."""

from __future__ import annotations

from dataclasses import dataclass, field

from cuvil.ir.devices import HOST
from cuvil.ir.graph import Graph, Node


@dataclass
class RuleStat:
    label: str
    where: str
    description: str
    matches: int = 0  # matches applied
    found: int = 0  # matches found, applied or not (a banned rule's are not)
    in_result: bool = False
    banned: int = 0  # times the match limit banned it

    @property
    def fired(self) -> bool:
        return self.matches > 0


@dataclass
class Iteration:
    index: int
    rulesets: tuple[str, ...]
    size: int  # e-nodes after the step
    seconds: float
    matches: int


@dataclass
class OptimizeReport:
    rules: dict[str, RuleStat] = field(default_factory=dict)
    iterations: list[Iteration] = field(default_factory=list)
    stop_reason: str = ""
    cost_before: float = 0.0
    cost_after: float = 0.0
    extraction: str = ""
    gap: float | None = None
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (rule chain, reason)
    # stage -> seconds, of the stages this compile ran (a cache hit ran no optimizer stage)
    timings: dict[str, float] = field(default_factory=dict)
    nodes_before: int = 0
    nodes_after: int = 0
    notes: list[str] = field(default_factory=list)
    cache: str = ""  # the compile cache: "" (not used), "hit (key ...)" or "miss: why"
    precision: list = field(default_factory=list)  # PrecisionChoice per int8-able value
    rule_check: str = ""  # the user rules' verification (`cuvil/verify/gate.py`), said
    egglog: str = field(default="", repr=False)  # the program run, replayable by egglog
    graph: Graph | None = field(default=None, repr=False)
    placed_on: str = ""  # the device the whole graph was placed on before (`ir/place.py`)

    @property
    def fired(self) -> list[RuleStat]:
        return [r for r in self.rules.values() if r.fired]

    def growth(self, top: int = 5) -> list[RuleStat]:
        """The rules that grew (or would have grown) the e-graph most, by matches."""
        ranked = sorted(self.rules.values(), key=lambda r: (-r.matches, -r.found, r.label))
        return [r for r in ranked[:top] if r.matches or r.found]

    def placement(self) -> str:
        """`12 node(s) on cuda, 3 on cpu; 4 transfer(s) per call, 2 constant(s) uploaded
        once`: where the graph's ops are, when any is off the CPU ("" otherwise)."""
        if self.graph is None:
            return ""
        counts: dict[str, int] = {}
        moves = uploads = 0
        for node in self.graph:
            if node.op in ("input", "const", "scalar"):
                continue
            if node.op != "to_device":
                counts[node.type.device] = counts.get(node.type.device, 0) + 1
            elif self.graph[node.inputs[0]].op == "const":
                uploads += 1
            else:
                moves += 1
        if set(counts) <= {HOST}:
            return ""
        return ", ".join(f"{n} node(s) on {d}" for d, n in sorted(counts.items(),
                                                                  key=lambda kv: -kv[1])) \
            + f"; {moves} transfer(s) per call" \
            + (f", {uploads} constant(s) uploaded once" if uploads else "")

    def placement_line(self) -> str:
        """Where the graph's ops are, and who chose: extraction, or the sole target."""
        if not self.placement():
            return ""
        how = (f"every node on {self.placed_on}, the sole target's device" if self.placed_on
               else "extraction's choice")
        return f"placement ({how}): {self.placement()}"

    def rule_line(self, label: str) -> str:
        stat = self.rules.get(label)
        return f"{label} ({stat.where})" if stat else label

    def explain(self, node: Node | str) -> str:
        """The chain of rewrites that produced `node`, each with its rule's description."""
        if isinstance(node, str):
            if self.graph is None or node not in self.graph.nodes:
                from cuvil.errors import CuvilError

                raise CuvilError(f"no node {node!r} in the optimized graph")
            node = self.graph[node]
        head = f"{node.name} = {node.op}" + (f"  (from {node.source})" if node.source else "")
        if not node.origin:
            return head + "\n  imported unchanged (no rule produced it)"
        return "\n".join([head, *self._chain(node.op, node.origin, set())])

    def explain_all(self, nodes) -> str:
        """The chains of the rewritten `nodes`: nodes with the same op and chain share one
        entry, and each rule's description is given once, where the rule first appears
        ("" when no node was rewritten)."""
        groups: dict[tuple[str, tuple[str, ...]], list[Node]] = {}
        for node in nodes:
            if node.origin:
                groups.setdefault((node.op, tuple(node.origin)), []).append(node)
        told: set[str] = set()
        lines = []
        for (op, origin), members in groups.items():
            sources = ", ".join(dict.fromkeys(n.source for n in members if n.source))
            lines.append(f"{', '.join(n.name for n in members)} = {op}"
                         + (f"  (from {sources})" if sources else ""))
            lines += self._chain(op, origin, told)
        return "\n".join(lines)

    def _chain(self, op: str, origin, told: set[str]) -> list[str]:
        """The chain line, then the description of each of its rules not in `told` (which
        gains them)."""
        lines = ["  " + " ← ".join([op, *(self.rule_line(lb) for lb in origin)])]
        for label in dict.fromkeys(origin):
            stat = self.rules.get(label)
            if stat and stat.description and label not in told:
                told.add(label)
                lines.append(f"    {label}: {stat.description}")
        return lines

    def __str__(self) -> str:
        made = " (when the cached graph was made)" if self.cache.startswith("hit") else ""
        lines = [f"cost {self.cost_before:.1f} us -> {self.cost_after:.1f} us "
                 f"({self.nodes_before} -> {self.nodes_after} nodes); "
                 f"extraction: {self.extraction}"
                 + (f", gap {self.gap:.2%}" if self.gap is not None else ""),
                 f"stopped{made}: {self.stop_reason} after {len(self.iterations)} iteration(s), "
                 f"e-graph {self.iterations[-1].size if self.iterations else 0} e-nodes"]
        fired = self.fired
        if fired:
            lines.append("rules fired (matches, in result):")
            width = max(24, *(len(r.label) for r in fired))
            for r in sorted(fired, key=lambda r: r.label):
                mark = "yes" if r.in_result else "no"
                lines.append(f"  {r.label:<{width}} {r.matches:>6}  {mark:<3}  {r.where}")
        if self.stop_reason not in ("saturated", "schedule complete"):
            grew = ", ".join(f"{r.label} ({r.matches} applied, {r.found} found)"
                             for r in self.growth(3))
            lines.append(f"grew the e-graph most: {grew or 'none'}")
        if self.placement_line():
            lines.append(self.placement_line())
        if self.precision:
            lines.append("precision (extraction's choice, by cost):")
            lines += [f"  {choice}" for choice in self.precision]
        for chain, reason in self.rejected:
            lines.append(f"rejected: {chain}: {reason}")
        lines += [f"note: {n}" for n in self.notes]
        if self.rule_check:
            lines.append(f"rules: {self.rule_check}")
        if self.cache:
            lines.append(f"compile cache: {self.cache}")
        if self.timings:
            stages = ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in self.timings.items())
            lines.append(f"time: {stages}")
        return "\n".join(lines)
