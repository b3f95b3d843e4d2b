"""An extraction decoded back into a Cuvil graph, with each node's provenance.

Nodes keep the name and source line of the imported node whose e-class they stand for
(when they are the same op), and `origin` lists the rules that produced them.
"""

from __future__ import annotations

from cuvil.egraph.extract import Selection
from cuvil.egraph.snapshot import Snapshot
from cuvil.egraph.typing import Typer
from cuvil.ir.graph import Graph, Node, unflatten


def origin_chain(text: str) -> tuple[str, ...]:
    """`" <- linear_relu <- matmul_add"` -> `("linear_relu", "matmul_add")`."""
    return tuple(p for p in (s.strip() for s in text.split(" <- ")) if p)


def decode(graph: Graph, snap: Snapshot, typer: Typer, selection: Selection,
           handles: dict[str, str], constants: dict) -> Graph:
    """Build the graph that `selection` picks, in topological order."""
    out = _decode(graph, snap, typer, selection, handles, constants)
    out.defs = _used_defs(out, typer.defs)
    return out


def _used_defs(graph: Graph, defs: dict) -> dict:
    """The composite ops the graph uses, and those their bodies use."""
    from cuvil.dsl import ast

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


def _decode(graph: Graph, snap: Snapshot, typer: Typer, selection: Selection,
            handles: dict[str, str], constants: dict) -> Graph:
    class_of = {name: snap.let_class[h] for name, h in handles.items()}
    original = {}
    for name, cls in class_of.items():
        original.setdefault(cls, graph[name])
    out = Graph(graph.name)
    out.defs = dict(typer.defs)
    value_of: dict[str, str] = {}
    for name in graph.inputs:
        out.input(name, graph[name].type)
        value_of[class_of[name]] = name
    for cls in _postorder(selection, [class_of[n] for n in graph.outputs]):
        if cls in value_of:
            continue
        cand = selection.choice[cls]
        node = snap.nodes[cand.id]
        op, attrs = typer.decode(node)
        t = typer.table.types[snap.ty[cls]]
        orig = original.get(cls)
        if op == "const":
            ref = attrs["ref"]
            out.constants[ref] = constants[ref]
            name = orig.name if orig is not None and orig.op == "const" else out.fresh("c")
            value_of[cls] = out._put(Node(name, "const", (), {"ref": ref}, t))
            continue
        name = orig.name if orig is not None and orig.op == op else None
        if name is not None and name in out.nodes:
            name = None
        origin = origin_chain(snap.origin.get(node.key, ""))
        value_of[cls] = out.add(op, [value_of[c] for c in node.children], attrs, type=t,
                                name=name, source=orig.source if orig is not None else "",
                                origin=origin)
    out.set_outputs(unflatten(graph.output_structure,
                              {n: value_of[class_of[n]] for n in graph.outputs}))
    return out


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
