"""A Python view of the e-graph: e-classes, e-nodes and analysis values, read from egglog.

egglog's `serialize().to_json()` lists every row of every table as a node. `Snapshot`
keeps the term e-nodes (sort `T`) with their child classes and literal arguments, the
`let` names of each class (handles Cuvil can refer to in later commands), and the values
of the `ty` (type id) and `org_*` (provenance) functions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from egglog import bindings

from cuvil.egraph.schema import SORT


@dataclass(frozen=True, slots=True)
class ENode:
    id: str
    ctor: str
    cls: str
    args: tuple[tuple[bool, str], ...]  # (is_class, class id or literal text), in order
    children: tuple[str, ...]  # the class arguments
    literals: tuple[str, ...]  # the literal arguments (attributes)

    @staticmethod
    def make(node_id: str, ctor: str, cls: str, args: tuple[tuple[bool, str], ...]) -> ENode:
        return ENode(node_id, ctor, cls, args, tuple(v for c, v in args if c),
                     tuple(v for c, v in args if not c))

    @property
    def key(self) -> tuple:
        """Identity of the e-node under the current class ids."""
        return (self.ctor, self.args)


def origin_text(raw: str) -> str:
    """Decode an origin string as serialized (quoted, JSON-style escapes)."""
    return json.loads(raw) if raw.startswith('"') else raw


@dataclass
class Snapshot:
    nodes: dict[str, ENode] = field(default_factory=dict)
    classes: dict[str, list[str]] = field(default_factory=dict)  # class -> e-node ids
    lets: dict[str, str] = field(default_factory=dict)  # class -> one let name
    let_class: dict[str, str] = field(default_factory=dict)  # every let name -> class
    ty: dict[str, int] = field(default_factory=dict)  # class -> type id
    origin: dict[tuple, str] = field(default_factory=dict)  # e-node key -> origin chain
    fired: set[tuple[str, str]] = field(default_factory=set)  # (class, label) of node removals
    rewrote: set[tuple[str, str]] = field(default_factory=set)  # (class, label), other rules

    @property
    def size(self) -> int:
        return len(self.nodes)


def take(egraph: bindings.EGraph, ctors: set[str]) -> Snapshot:
    """Serialize `egraph` and index its term nodes and analysis rows."""
    data = json.loads(egraph.serialize([]).to_json())
    raw, class_data = data["nodes"], data.get("class_data", {})
    literal = {v["eclass"]: v["op"] for k, v in raw.items() if k.startswith("primitive-")}
    node_class = {k: v["eclass"] for k, v in raw.items()}
    snap = Snapshot()

    def arg(child: str) -> tuple[bool, str]:
        cls = node_class[child]
        if cls.startswith(SORT + "-"):
            return True, cls
        return False, literal.get(cls, raw[child]["op"])

    for node_id, v in raw.items():
        op, cls = v["op"], v["eclass"]
        if op in ctors and cls.startswith(SORT + "-"):
            node = ENode.make(node_id, op, cls, tuple(arg(c) for c in v["children"]))
            snap.nodes[node_id] = node
            snap.classes.setdefault(cls, []).append(node_id)
        elif op == "ty":
            snap.ty[node_class[v["children"][0]]] = int(literal[cls])
        elif op in ("fired", "rewrote"):
            (_, cls_id), (_, label) = arg(v["children"][0]), arg(v["children"][1])
            getattr(snap, op).add((cls_id, json.loads(label)))
        elif op.startswith("org_"):
            key = (op[4:], tuple(arg(c) for c in v["children"]))
            snap.origin[key] = literal[cls]  # egglog's quoted text: see `origin_text`
    for cls, info in class_data.items():
        if info.get("type") == SORT and info.get("let"):
            names = info["let"].split(", ")
            snap.lets[cls] = names[0]
            snap.let_class.update(dict.fromkeys(names, cls))
    return snap
