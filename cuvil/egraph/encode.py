"""Cuvil IR -> an egglog program: declarations, then one `let` per node (never deep terms).

    (datatype T (Input String) (Const String) (Matmul T T) (Conv2d T T String String ...) ...)
    (function ty (T) i64 :merge old)          ; type id, interned by `TypeTable`
    (function t_rank (i64) i64 :merge old) ...; what guards read, per type id
    (function org_Matmul (T T) String :merge old) ...   ; provenance per constructor
    (let $n3 (Matmul $n1 $n2))
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cuvil.egraph.guards import CLASS_ANALYSES, TYPE_ANALYSES
from cuvil.egraph.schema import BOOL, SORT, arities, ctor, encode_attr, encode_string, signature
from cuvil.egraph.typer import TypeTable, analysis_commands
from cuvil.ir.graph import Graph, Node
from cuvil.ops import registry
from cuvil.ops.registry import OpDef


def _analysis_decls() -> str:
    """The tables guards read (one per built-in the table keeps; `dim` is indexed too),
    the type id of each e-class, and the relations `explain` and coverage read."""
    lines = ["(function ty (T) i64 :merge old)", "(function t_dim (i64 i64) i64 :merge old)"]
    lines += [f"(function t_{name} (i64) {sort} :merge old)"
              for name, sort in TYPE_ANALYSES.items()]
    lines += [f"(function {name} (T) {sort} :merge {'(or old new)' if sort == BOOL else 'old'})"
              for name, sort in CLASS_ANALYSES.items()]
    return "\n".join([*lines, "(relation fired (T String))", "(relation rewrote (T String))"]) \
        + "\n"


ANALYSIS_DECLS = _analysis_decls()


@dataclass
class Constructors:
    """Every constructor of sort T: name -> (OpDef, number of tensor inputs)."""

    table: dict[str, tuple[OpDef, int]] = field(default_factory=dict)

    def add(self, opdef: OpDef, n_inputs: int) -> str:
        name = ctor(opdef, n_inputs)
        known = self.table.setdefault(name, (opdef, n_inputs))
        if known[0].name != opdef.name:
            from cuvil.errors import CuvilError

            raise CuvilError(f"ops {known[0].name!r} and {opdef.name!r} clash in egglog "
                             f"as {name}; rename one")
        return name

    def declarations(self) -> str:
        variants = [f"({name} {' '.join(signature(op, n))})".replace(" )", ")")
                    for name, (op, n) in self.table.items()]
        lines = [f"(datatype {SORT}\n  " + "\n  ".join(variants) + ")", ANALYSIS_DECLS]
        for name, (op, n) in self.table.items():
            sig = " ".join(signature(op, n))
            lines.append(f"(function org_{name} ({sig}) String :merge old)")
        return "\n".join(lines) + "\n"


def constructors(defs: dict[str, OpDef], extra: list[tuple[str, int]] = ()) -> Constructors:
    """Constructors for the whole catalog, the composite ops and any extra arities."""
    table = Constructors()
    for opdef in [*registry.all_ops().values(), *defs.values()]:
        for n in arities(opdef):
            table.add(opdef, n)
    for op, n in extra:
        table.add(registry.get(op, defs), n)
    return table


def term_of(node: Node, handles: dict[str, str], defs: dict) -> str:
    opdef = registry.get(node.op, defs)
    if node.op == "input":
        return f"(Input {encode_string(node.name)})"
    parts = [handles[i] for i in node.inputs]
    parts += [encode_attr(node.attrs[a.name], a.kind) for a in opdef.attrs]
    return f"({ctor(opdef, len(node.inputs))} {' '.join(parts)})".replace(" )", ")")


@dataclass
class Encoding:
    commands: list[str]
    handles: dict[str, str]  # IR value name -> egglog let name


def encode_graph(graph: Graph, types: TypeTable, facts: dict | None = None) -> Encoding:
    """One `let` per node, its analyses (with the calibration `facts` of node names), and
    an empty origin (imported nodes)."""
    facts = facts or {}
    handles: dict[str, str] = {}
    commands: list[str] = []
    for k, node in enumerate(graph):
        handle = f"$n{k}"
        handles[node.name] = handle
        term = term_of(node, handles, graph.defs)
        commands.append(f"(let {handle} {term})")
        commands.append(f'(set (org_{term[1:]} "")')
        value = node.attrs["value"] if node.op == "scalar" else None
        commands += analysis_commands(handle, node.type, types,
                                      is_const=node.op in ("const", "scalar"), value=value,
                                      facts=facts.get(node.name))
    return Encoding(types.flush() + commands, handles)
