"""An extraction decoded back into a Cuvil graph, with each node's provenance.

Nodes keep the name and source line of the imported node whose e-class they stand for
(when they are the same op), and `origin` lists the rules that produced them. Chosen
e-nodes whose inputs are all constants are evaluated here, once, into new constants; the
graph keeps only the nodes its outputs use (not the constants a fold read).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from cuvil.dsl import ast
from cuvil.egraph.extract import Selection
from cuvil.egraph.fold import evaluate, evaluate_named
from cuvil.egraph.snapshot import origin_text
from cuvil.ir.graph import Graph, Node, unflatten
from cuvil.ir.recipe import UNKNOWN, Call, Ref
from cuvil.ir.types import DType


def origin_chain(text: str) -> tuple[str, ...]:
    """`" <- linear_relu <- matmul_add"` -> `("linear_relu", "matmul_add")`."""
    text = origin_text(text)
    return tuple(p for p in (s.strip() for s in text.split(" <- ")) if p)


@dataclass
class _Decoder:
    graph: Graph  # the input graph
    session: object
    selection: Selection
    out: Graph = field(init=False)
    name_of: dict[str, str] = field(default_factory=dict)  # class -> value name
    tensor_of: dict[str, torch.Tensor] = field(default_factory=dict)  # constant classes
    term_of: dict[str, Any] = field(default_factory=dict)  # their terms (`ir.recipe`)
    recipes: dict[str, Any] = field(default_factory=dict)  # fold ref -> its term
    folds: int = 0

    def __post_init__(self):
        self.out = Graph(self.graph.name)
        self.out.defs = dict(self.session.typer.defs)
        snap = self.session.snapshot
        self.class_of = {n: snap.let_class[h] for n, h in self.session.encoding.handles.items()}
        self.original: dict[str, Node] = {}
        imported: dict[str, int] = {}
        for name, cls in self.class_of.items():
            self.original.setdefault(cls, self.graph[name])
            imported[cls] = imported.get(cls, 0) + 1
        self.merged: dict[str, list[str]] = {}  # class of several imported nodes -> rules
        for cls, label in sorted(snap.fired | snap.rewrote):
            if imported.get(cls, 0) > 1:
                self.merged.setdefault(cls, []).append(label)

    def run(self) -> Graph:
        for name in self.graph.inputs:
            self.out.input(name, self.graph[name].type)
            self.name_of[self.class_of[name]] = name
        roots = [self.class_of[n] for n in self.graph.outputs]
        for cls in _postorder(self.selection, roots):
            if cls not in self.name_of:
                self.name_of[cls] = self.emit(cls)
        self.out.set_outputs(unflatten(self.graph.output_structure,
                                       {n: self.name_of[self.class_of[n]]
                                        for n in self.graph.outputs}))
        self.out.set_mutations({x: self.name_of[self.class_of[v]]
                                for x, v in self.graph.mutations.items()})
        self.out.defs = _used_defs(self.out, self.out.defs)
        if self.graph.recipes is not None:
            self.out.recipes = {**self.graph.recipes, **self.recipes}
        return self.out.prune()  # a fold's inputs, folded into its result, are not used

    def emit(self, cls: str) -> str:
        snap, typer = self.session.snapshot, self.session.typer
        node = snap.nodes[self.selection.choice[cls].id]
        op, attrs = typer.decode(node)
        t = typer.table.types[snap.ty[cls]]
        orig = self.original.get(cls)
        keep = orig is not None and orig.op == op and orig.name not in self.out.nodes
        name = orig.name if keep else None
        origin = origin_chain(snap.origin.get(node.key, ""))
        origin += tuple(lb for lb in self.merged.get(cls, ()) if lb not in origin)
        if op == "const":
            ref = attrs["ref"]
            self.tensor_of[cls], self.term_of[cls] = self.graph.constants[ref], Ref(ref)
            return self._const(ref, self.graph.constants[ref], t, name, ())
        if op == "scalar":
            self.tensor_of[cls] = torch.tensor(attrs["value"], dtype=DType(attrs["dtype"]).torch)
            self.term_of[cls] = self.tensor_of[cls]
        elif (self.session.folder.foldable(node, t, typer)
              and all(c in self.tensor_of for c in node.children)):
            opdef = typer.ctors[node.ctor][0]
            value = evaluate(opdef, attrs, [self.tensor_of[c] for c in node.children])
            self.tensor_of[cls] = value
            self.folds += 1
            ref = f"~fold{self.folds}"
            self.term_of[cls] = Ref(ref)
            self.recipes[ref] = UNKNOWN if op in self.session.typer.defs else \
                Call(evaluate_named, (op, attrs, [self.term_of[c] for c in node.children]))
            return self._const(ref, value, t, None, ("fold", *origin))
        source = orig.source if orig is not None else ""
        return self.out.add(op, [self.name_of[c] for c in node.children], attrs, type=t,
                            name=name, source=source, origin=origin)

    def _const(self, ref: str, tensor: torch.Tensor, t, name: str | None,
               origin: tuple[str, ...]) -> str:
        self.out.constants[ref] = tensor
        node = Node(name or self.out.fresh("c"), "const", (), {"ref": ref}, t, "", origin)
        return self.out._put(node)


def decode(graph: Graph, session, selection: Selection) -> Graph:
    """Build the graph that `selection` picks, in topological order."""
    return _Decoder(graph, session, selection).run()


def _used_defs(graph: Graph, defs: dict) -> dict:
    """The composite ops the graph uses, and those their bodies use."""
    used, stack = {}, [n.op for n in graph if n.op in defs]
    while stack:
        op = stack.pop()
        if op in used:
            continue
        used[op] = defs[op]
        terms = [defs[op].body.body]
        while terms:
            t = terms.pop()
            if isinstance(t, ast.Call):
                if t.op in defs:
                    stack.append(t.op)
                terms.extend(t.args)
    return dict(sorted(used.items()))


def _postorder(selection: Selection, roots: list[str]) -> list[str]:
    order, done, stack = [], set(), [(r, False) for r in reversed(roots)]
    while stack:
        cls, expanded = stack.pop()
        if cls in done:
            continue
        if expanded:
            done.add(cls)
            order.append(cls)
            continue
        stack.append((cls, True))
        for child in reversed(selection.choice[cls].children):
            if child not in done:
                stack.append((child, False))
    return order
