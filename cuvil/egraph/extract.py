"""Extraction: pick one e-node per needed e-class so that the whole graph costs least.

Costs are DAG costs: a subgraph shared by several users is paid once (egglog's default
extractor is tree-based and pays it once per use). Three extractors:

- `greedy_tree`: tree costs, linear time, for e-graphs too big for the next one.
- `greedy_dag`: bottom-up to a fixpoint; each e-class keeps the set of classes its best
  choice needs, with their costs, and a candidate's cost is that of the union of its
  children's sets. Fast, handles cycles (a candidate whose children already need its own
  class is skipped), not always optimal.
- `exact`: an integer program (scipy's HiGHS `milp`, with a time limit): one binary per
  e-node and per e-class, order variables forbid cycles. Reports the optimality gap. With
  `minimax` it minimizes the busiest resource's load instead of the sum (`throughput`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

MINIMAX_TIE = 1e-3  # weight of the total next to the busiest load (minimax objective)


@dataclass(frozen=True)
class Candidate:
    id: str
    cls: str
    cost: float
    children: tuple[str, ...]
    resource: str = ""  # what it keeps busy: a device, or "link" (the `throughput` strategy)


@dataclass
class Problem:
    classes: dict[str, list[Candidate]]
    roots: list[str]


@dataclass
class Selection:
    choice: dict[str, Candidate]  # class -> chosen e-node (only classes the roots need)
    cost: float
    method: str
    gap: float | None = None  # exact mode: relative optimality gap (0 = proven optimal)
    notes: list[str] = field(default_factory=list)


def resource_loads(choice: dict[str, Candidate], roots: list[str]) -> dict[str, float]:
    """What each resource does per call: the costs of the chosen e-nodes it runs."""
    loads: dict[str, float] = {}
    for cand in _needed(choice, roots).values():
        loads[cand.resource] = loads.get(cand.resource, 0.0) + cand.cost
    return loads


def dag_cost(choice: dict[str, Candidate], roots: list[str]) -> float:
    seen, stack, total = set(), list(roots), 0.0
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.add(cls)
        total += choice[cls].cost
        stack.extend(choice[cls].children)
    return total


def _needed(best: dict[str, Candidate], roots: list[str]) -> dict[str, Candidate]:
    choice, stack = {}, list(roots)
    while stack:
        cls = stack.pop()
        if cls not in choice:
            choice[cls] = best[cls]
            stack.extend(best[cls].children)
    return choice


def _parents_and_leaves(problem: Problem) -> tuple[dict[str, list[Candidate]],
                                                     deque[Candidate]]:
    """Each class's parent e-nodes, and the e-nodes without children (where bottom-up
    extraction starts)."""
    parents: dict[str, list[Candidate]] = {}
    leaves: deque[Candidate] = deque()
    for cands in problem.classes.values():
        for cand in cands:
            for child in set(cand.children):
                parents.setdefault(child, []).append(cand)
            if not cand.children:
                leaves.append(cand)
    return parents, leaves


def greedy_dag(problem: Problem) -> Selection:
    parents, queue = _parents_and_leaves(problem)
    best: dict[str, tuple[float, dict[str, float], Candidate]] = {}
    while queue:
        cand = queue.popleft()
        if not all(c in best for c in cand.children):
            continue
        kids = sorted((best[c] for c in set(cand.children)), key=lambda b: len(b[1]),
                      reverse=True)
        if any(cand.cls in b[1] for b in kids):
            continue  # would need itself: a cycle
        total, needed = (kids[0][0], dict(kids[0][1])) if kids else (0.0, {})
        for _, other, _ in kids[1:]:  # add what the largest set lacks
            for k, v in other.items():
                if k not in needed:
                    needed[k] = v
                    total += v
        needed[cand.cls] = cand.cost
        total += cand.cost
        if cand.cls not in best or total < best[cand.cls][0]:
            best[cand.cls] = (total, needed, cand)
            queue.extend(parents.get(cand.cls, ()))
    missing = [r for r in problem.roots if r not in best]
    if missing:
        raise ValueError(f"no finite extraction for e-class(es) {', '.join(missing)}")
    choice = _needed({c: v[2] for c, v in best.items()}, problem.roots)
    return Selection(choice, dag_cost(choice, problem.roots), "greedy-dag")


def greedy_tree(problem: Problem) -> Selection:
    """Bottom-up tree costs (a shared subgraph counts once per use): linear time, for
    e-graphs too large for `greedy_dag`. Strict improvement keeps the choice acyclic."""
    parents, queue = _parents_and_leaves(problem)
    best: dict[str, tuple[float, Candidate]] = {}
    while queue:
        cand = queue.popleft()
        if not all(c in best for c in cand.children):
            continue
        total = cand.cost + sum(best[c][0] for c in cand.children)
        if cand.cls not in best or total < best[cand.cls][0]:
            best[cand.cls] = (total, cand)
            queue.extend(parents.get(cand.cls, ()))
    choice = _needed({c: v[1] for c, v in best.items()}, problem.roots)
    return Selection(choice, dag_cost(choice, problem.roots), "greedy-tree")


def _reachable(problem: Problem) -> list[str]:
    seen, stack = set(), list(problem.roots)
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.add(cls)
        for cand in problem.classes[cls]:
            stack.extend(cand.children)
    order = {c: i for i, c in enumerate(problem.classes)}
    return sorted(seen, key=order.__getitem__)


class _Program:
    """The integer program of an extraction: variables x (one per candidate), then y (one
    per class: needed or not), then o (each class's place in a topological order), then
    t (the busiest load) with `minimax`; sparse constraint rows lo <= A v <= hi."""

    def __init__(self, problem: Problem, minimax: bool):
        self.classes = _reachable(problem)
        self.col = {c: i for i, c in enumerate(self.classes)}
        self.cands = [cand for c in self.classes for cand in problem.classes[c]]
        n_x, n_c = len(self.cands), len(self.classes)
        self.y0, self.o0, self.n = n_x, n_x + n_c, n_x + 2 * n_c + int(minimax)
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []

    def y(self, cls: str) -> int:
        return self.y0 + self.col[cls]

    def o(self, cls: str) -> int:
        return self.o0 + self.col[cls]

    def constraint(self, entries: list[tuple[int, float]], low: float, high: float) -> None:
        r = len(self.lo)
        for c, v in entries:
            self.rows.append(r)
            self.cols.append(c)
            self.vals.append(v)
        self.lo.append(low)
        self.hi.append(high)

    def structure(self) -> None:
        """A needed class picks exactly one candidate; a picked candidate needs its
        children, each placed after it in the order (so no cycle is picked)."""
        members: dict[str, list[int]] = {c: [] for c in self.classes}
        for i, cand in enumerate(self.cands):
            members[cand.cls].append(i)
        for cls in self.classes:
            self.constraint([(i, 1.0) for i in members[cls]] + [(self.y(cls), -1.0)], 0.0, 0.0)
        big = float(len(self.classes) + 1)
        for i, cand in enumerate(self.cands):
            for child in set(cand.children):
                self.constraint([(i, 1.0), (self.y(child), -1.0)], -np.inf, 0.0)
                self.constraint([(self.o(cand.cls), 1.0), (self.o(child), -1.0), (i, -big)],
                                1.0 - big, np.inf)

    def objective(self, minimax: bool) -> np.ndarray:
        """The candidates' total cost; with `minimax`, t (bounding every resource's load)
        plus the total weighted by MINIMAX_TIE."""
        cost = np.zeros(self.n)
        cost[:self.y0] = [c.cost for c in self.cands]
        if minimax:
            cost[:self.y0] *= MINIMAX_TIE
            cost[self.n - 1] = 1.0
            for resource in sorted({c.resource for c in self.cands}):
                self.constraint([(i, c.cost) for i, c in enumerate(self.cands)
                                 if c.resource == resource] + [(self.n - 1, -1.0)], -np.inf, 0.0)
        return cost

    def bounds(self, roots: list[str], minimax: bool) -> tuple[np.ndarray, np.ndarray]:
        """Binaries but the order (0..classes) and t (>= 0); roots needed; a candidate
        that is its own child never picked."""
        lower, upper = np.zeros(self.n), np.ones(self.n)
        upper[self.o0:] = len(self.classes)
        if minimax:
            upper[self.n - 1] = np.inf
        for r in roots:
            lower[self.y(r)] = 1.0
        for i, cand in enumerate(self.cands):
            if cand.cls in cand.children:
                upper[i] = 0.0
        return lower, upper


def exact(problem: Problem, time_limit: float = 10.0, minimax: bool = False) -> Selection:
    """Optimal DAG extraction by integer programming (falls back to greedy on failure).
    With `minimax`, the objective is the busiest resource's load (`resource_loads`), ties
    broken by the total: the `throughput` strategy."""
    from scipy.optimize import Bounds, LinearConstraint, milp  # 0.5 s: only when solving
    from scipy.sparse import coo_array

    program = _Program(problem, minimax)
    program.structure()
    cost = program.objective(minimax)
    lower, upper = program.bounds(problem.roots, minimax)
    integrality = np.ones(program.n)
    integrality[program.o0:] = 0
    matrix = coo_array((program.vals, (program.rows, program.cols)),
                       shape=(len(program.lo), program.n)).tocsr()
    res = milp(cost, constraints=LinearConstraint(matrix, program.lo, program.hi),
               integrality=integrality, bounds=Bounds(lower, upper),
               options={"time_limit": time_limit})
    if res.x is None:
        sel = greedy_dag(problem)
        sel.notes.append(f"ILP found no solution ({res.message.strip()}); used greedy")
        return sel
    cands = program.cands
    chosen = {cands[i].cls: cands[i] for i in range(program.y0) if res.x[i] > 0.5}
    choice = _needed(chosen, problem.roots)
    gap = float(getattr(res, "mip_gap", 0.0) or 0.0) if res.status != 0 else 0.0
    return Selection(choice, dag_cost(choice, problem.roots), "exact-ilp", gap)
