"""E-class analyses: every e-class's type, computed by the op catalog, stored in egglog.

Rewrites create e-classes egglog knows nothing about (`to_layout(x, "NHWC")` inside a
right-hand side). After each iteration `Typer.sync` reads the e-graph, infers the type of
each new e-class from its e-nodes with the catalog's `infer` (the one ground truth, symbolic
dims included) and writes it back: a type id plus the values guards read (`rank`, `dim`,
`layout`, ...). An e-node whose inferred type disagrees with its class (a rule that changed a
dtype, layout, device or shape without a conversion) or that cannot be typed at all is
recorded and kept out of extraction. Constant subterms are folded into new constants.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sympy

from cuvil.dsl.builtins import BUILTINS, NOWHERE, Known
from cuvil.egraph.guards import CLASS_ANALYSES, TYPE_ANALYSES
from cuvil.egraph.schema import BOOL, F64, I64, decode_attr, encode_f64, encode_string
from cuvil.egraph.snapshot import ENode, Snapshot
from cuvil.errors import CuvilError
from cuvil.ir.text import format_value
from cuvil.ir.types import DType, TensorType, is_static
from cuvil.ops import registry


@dataclass
class TypeTable:
    """Interns types (ids >= 0) and symbolic dims (ids < 0: never equal to a size).

    What guards read about a type lives in tables keyed by the type id (`t_rank`, `t_dim`,
    `t_layout`, ...), written once per distinct type; an e-class only stores its `ty`.
    """

    uses: set[str] = field(default_factory=set)  # analyses the rules read
    dims: set[int] = field(default_factory=set)  # dim indices the rules read
    types: list[TensorType] = field(default_factory=list)
    ids: dict[TensorType, int] = field(default_factory=dict)
    symbols: dict[Any, int] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)  # rows of new types, not yet sent

    def id(self, t: TensorType) -> int:
        if t not in self.ids:
            self.ids[t] = len(self.types)
            self.types.append(t)
            self.pending += self._rows(self.ids[t], t)
        return self.ids[t]

    def flush(self) -> list[str]:
        out, self.pending = self.pending, []
        return out

    def dim_value(self, d) -> int:
        if is_static(d):
            return d
        return self.symbols.setdefault(sympy.sympify(d), -1 - len(self.symbols))

    def _rows(self, k: int, t: TensorType) -> list[str]:
        """The analyses the rules read, for type id `k`: each built-in's own value (a
        symbolic dim is a negative id; a symbolic `numel` is left unknown)."""
        out = [f"(set (t_dim {k} {i}) {self.dim_value(t.shape[i])})"
               for i in sorted(self.dims) if -t.rank <= i < t.rank]
        for name, sort in TYPE_ANALYSES.items():
            if name not in self.uses or (name == "numel" and not t.is_static):
                continue
            value = BUILTINS[name].value(NOWHERE, Known(t))
            out.append(f"(set (t_{name} {k}) {_egglog_value(value, sort)})")
        return out


def _egglog_value(v: Any, sort: str) -> str:
    if sort == BOOL:
        return "true" if v else "false"
    if sort == I64:
        return str(v)
    return encode_string(format_value(v) if isinstance(v, tuple) else v)


def analysis_commands(handle: str, t: TensorType, table: TypeTable, is_const: bool = False,
                      value: Any = None, facts: dict[str, Any] | None = None) -> list[str]:
    """`set` commands giving e-class `handle` its type (and constness, scalar value, and
    the calibration facts observed of it)."""
    out = [f"(set (ty {handle}) {table.id(t)})"]
    known = Known(t, is_const, value, facts or None)
    for name, sort in CLASS_ANALYSES.items():
        v = BUILTINS[name].value(NOWHERE, known) if name in table.uses else None
        if v is None or (name in ("calibrated", "half_ok") and not v):  # no such fact
            continue
        text = encode_f64(v) if sort == F64 else _egglog_value(v, sort)
        out.append(f"(set ({name} {handle}) {text})")
    return out


@dataclass(frozen=True)
class Rejected:
    """An e-node kept out of extraction, and why."""

    node: ENode
    origin: str
    reason: str


@dataclass
class Typer:
    ctors: dict  # constructor name -> (OpDef, n_inputs)
    defs: dict
    table: TypeTable
    leaves: dict[tuple[str, Any], TensorType] = field(default_factory=dict)  # (op, name)
    rejected: dict[tuple, Rejected] = field(default_factory=dict)
    checked: set[tuple] = field(default_factory=set)
    handles: int = 0
    _memo: dict = field(default_factory=dict)

    def decode(self, node: ENode) -> tuple[str, dict[str, Any]]:
        opdef, _ = self.ctors[node.ctor]
        if opdef.name == "input":
            return "input", {"name": decode_attr(node.literals[0], "str")}
        lits = node.literals
        attrs = {a.name: decode_attr(lits[i], a.kind) for i, a in enumerate(opdef.attrs)}
        if opdef.name == "scalar" and not DType(attrs["dtype"]).is_float:
            value = attrs["value"]  # stored as f64 in egglog
            attrs["value"] = bool(value) if attrs["dtype"] == "bool" else int(value)
        return opdef.name, attrs

    def infer(self, node: ENode, types: dict[str, int]) -> TensorType | str:
        """The e-node's type, or a message saying why it has none."""
        key = (node.ctor, tuple(types[c] for c in node.children), node.literals)
        if key not in self._memo:
            op, attrs = self.decode(node)
            if op in ("input", "const"):
                leaf = self.leaves.get((op, attrs.get("name", attrs.get("ref"))))
                return leaf or f"unknown {op} {node.literals[0]}"
            try:
                child_types = [self.table.types[types[c]] for c in node.children]
                self._memo[key] = registry.infer(op, child_types, attrs, defs=self.defs)
            except CuvilError as e:
                self._memo[key] = str(e)
        return self._memo[key]

    def sync(self, snap: Snapshot) -> list[str]:
        """Commands that type every typeable new class; records rejected e-nodes."""
        types = dict(snap.ty)
        commands: list[str] = []
        handles = dict(snap.lets)
        progress = True
        while progress:
            progress = False
            for cls, node_ids in snap.classes.items():
                for node_id in node_ids:
                    node = snap.nodes[node_id]
                    if node.key in self.checked or node.key in self.rejected:
                        continue
                    if not all(c in types for c in node.children):
                        continue
                    self.checked.add(node.key)
                    result = self.infer(node, types)
                    if isinstance(result, str):
                        self._reject(node, snap, f"cannot be typed: {result}")
                    elif cls not in types:
                        types[cls] = self.table.id(result)
                        handle = self._handle(cls, node, handles, commands)
                        commands += analysis_commands(handle, result, self.table)
                        progress = True
                    elif self.table.types[types[cls]] != result:
                        want = self.table.types[types[cls]]
                        self._reject(node, snap, f"changes {_difference(want, result)} "
                                                 "without a conversion op")
        return self.table.flush() + commands

    def _handle(self, cls: str, node: ENode, handles: dict[str, str], out: list[str]) -> str:
        if cls in handles:
            return handles[cls]
        args = [handles[v] if is_cls else v for is_cls, v in node.args]
        self.handles += 1
        handle = f"$a{self.handles}"
        out.append(f"(let {handle} ({node.ctor} {' '.join(args)}))".replace(" ))", "))"))
        handles[cls] = handle
        return handle

    def _reject(self, node: ENode, snap: Snapshot, reason: str) -> None:
        origin = snap.origin.get(node.key, "")
        self.rejected[node.key] = Rejected(node, origin, reason)


def _difference(a: TensorType, b: TensorType) -> str:
    for what in ("dtype", "layout", "device", "shape"):
        if getattr(a, what) != getattr(b, what):
            return f"{what} {_text(getattr(a, what))} -> {_text(getattr(b, what))}"
    return "type"


def _text(v: Any) -> str:
    return format_value(v) if isinstance(v, tuple) else str(v)
