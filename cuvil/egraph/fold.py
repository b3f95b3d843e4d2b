"""Constant folding: a subterm whose inputs are all constants costs nothing at run time.

An e-class is constant when it holds a `const` or `scalar` e-node, or an e-node of a
foldable op whose inputs are all constant classes. Guards see it (`is_const`, `value` of
0-d constants); the cost model charges such e-nodes nothing; decoding evaluates the chosen
ones once, at compile time, with the catalog's reference implementation, into new
constants (`~fold3`). This is how `conv2d(x, w * s)` with a constant scale becomes
`conv2d(x, w')`: a rule says what is equal, folding makes the cheap form free.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from cuvil.dsl.builtins import BUILTINS, NOWHERE, Known
from cuvil.egraph.schema import encode_f64
from cuvil.egraph.snapshot import ENode, Snapshot
from cuvil.egraph.typer import Typer
from cuvil.ir.types import DType, TensorType
from cuvil.ops.registry import LEAF, OpDef

MAX_NUMEL = 1 << 24


def _constant_leaf(opdef: OpDef) -> bool:
    """`const` and `scalar`: leaves whose value is known at compile time."""
    return opdef.kind == LEAF and opdef.foldable


@dataclass
class Folder:
    enabled: bool = True
    constant: set[str] = field(default_factory=set)  # constant e-classes (last sync)
    announced: set[str] = field(default_factory=set)  # classes whose constness egglog knows

    def foldable(self, node: ENode, t: TensorType, typer: Typer) -> bool:
        """A non-leaf e-node that can be computed at compile time."""
        return (self.enabled and typer.ctors[node.ctor][0].foldable and bool(node.children)
                and all(c in self.constant for c in node.children)
                and t.is_static and t.numel <= MAX_NUMEL)

    def sync(self, snap: Snapshot, typer: Typer) -> list[str]:
        """Find the constant classes; tell egglog about new ones if guards ask."""
        self.constant = set()
        users: dict[str, list[ENode]] = {}
        work: list[ENode] = []
        for node in snap.nodes.values():
            for child in node.children:
                users.setdefault(child, []).append(node)
            if _constant_leaf(typer.ctors[node.ctor][0]):
                work.append(node)
        while work:  # a class turns constant once; then its users are looked at
            node = work.pop()
            if node.cls in self.constant or node.cls not in snap.ty:
                continue
            t = typer.table.types[snap.ty[node.cls]]
            if _constant_leaf(typer.ctors[node.ctor][0]) or self.foldable(node, t, typer):
                self.constant.add(node.cls)
                work.extend(users.get(node.cls, ()))
        return self._announce(snap, typer)

    def _announce(self, snap: Snapshot, typer: Typer) -> list[str]:
        uses = typer.table.uses
        if not uses & {"is_const", "value"}:
            return []
        out = []
        for cls in sorted(self.constant - self.announced):
            handle = snap.lets.get(cls)
            if handle is None:
                continue
            self.announced.add(cls)
            t = typer.table.types[snap.ty[cls]]
            number = (self.scalar_value(cls, snap, typer)
                      if "value" in uses and t.rank == 0 and t.dtype is not DType.bf16 else None)
            known = Known(t, const=True, scalar=number)
            if "is_const" in uses:
                is_const = BUILTINS["is_const"].value(NOWHERE, known)
                out.append(f"(set (is_const {handle}) {'true' if is_const else 'false'})")
            if (v := BUILTINS["value"].value(NOWHERE, known)) is not None:
                out.append(f"(set (value {handle}) {encode_f64(v)})")
        return out

    def scalar_value(self, cls: str, snap: Snapshot, typer: Typer) -> float | None:
        for node_id in snap.classes[cls]:
            op, attrs = typer.decode(snap.nodes[node_id])
            if op == "scalar":
                return attrs["value"]
        return None


def evaluate(opdef, attrs: dict, inputs: list[torch.Tensor]) -> torch.Tensor:
    """One folded e-node, computed with the reference implementation."""
    with torch.no_grad():
        return opdef.ref(inputs, attrs).contiguous()


def evaluate_named(op: str, attrs: dict, inputs: list[torch.Tensor]) -> torch.Tensor:
    """`evaluate` of the catalog's op `op`: a fold's recipe (`ir.recipe`), replayed."""
    from cuvil.ops.registry import get

    return evaluate(get(op), attrs, inputs)
