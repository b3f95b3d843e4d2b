"""Constant folding inside the e-graph: a subterm whose inputs are all constants is
evaluated once, at compile time, with the catalog's reference implementation, and its
e-class gains a new constant (`Const "~fold3"`, or a `Scalar` when 0-d).

This is how `conv2d(x, w * s)` with a constant scale turns into `conv2d(x, w')`: a rule
says what is equal, folding makes the cheap form exist.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from cuvil.egraph.schema import encode_f64, encode_string
from cuvil.egraph.snapshot import ENode, Snapshot
from cuvil.egraph.typing import Typer, analysis_commands
from cuvil.ir.types import DType

NO_FOLD = {"input", "const", "scalar", "torch_op", "to_layout", "to_device"}
MAX_NUMEL = 1 << 24


@dataclass
class Folder:
    constants: dict[str, torch.Tensor]  # graph constants; folded ones are added
    enabled: bool = True
    folded: dict[tuple, str] = field(default_factory=dict)  # e-node key -> new ref
    count: int = 0

    def sync(self, snap: Snapshot, typer: Typer) -> list[str]:
        if not self.enabled:
            return []
        values = self._constant_classes(snap, typer)
        commands: list[str] = []
        for cls, node_ids in snap.classes.items():
            if cls in values or cls not in snap.ty or cls not in snap.lets:
                continue
            for node_id in node_ids:
                node = snap.nodes[node_id]
                op, _ = typer.decode(node)
                if (op in NO_FOLD or node.key in typer.rejected or not node.children
                        or not all(c in values for c in node.children)):
                    continue
                commands += self._fold(node, snap, typer, values)
                break
        return commands

    def _constant_classes(self, snap: Snapshot, typer: Typer) -> dict[str, torch.Tensor]:
        values = {}
        for cls, node_ids in snap.classes.items():
            for node_id in node_ids:
                op, attrs = typer.decode(snap.nodes[node_id])
                if op == "const" and attrs["ref"] in self.constants:
                    values[cls] = self.constants[attrs["ref"]]
                elif op == "scalar":
                    values[cls] = torch.tensor(attrs["value"], dtype=DType(attrs["dtype"]).torch)
        return values

    def _fold(self, node: ENode, snap: Snapshot, typer: Typer, values: dict) -> list[str]:
        t = typer.table.types[snap.ty[node.cls]]
        if not t.is_static or t.numel > MAX_NUMEL:
            return []
        op, attrs = typer.decode(node)
        opdef = typer.ctors[node.ctor][0]
        with torch.no_grad():
            result = opdef.ref([values[c] for c in node.children], attrs).contiguous()
        handle = snap.lets[node.cls]
        origin = encode_string(" <- fold" + snap.origin.get(node.key, ""))
        if t.rank == 0 and t.dtype is not DType.bf16:
            leaf = f"(Scalar {encode_f64(result.item())} {encode_string(str(t.dtype))})"
            value = result.item()
        else:
            ref = self.folded.get(node.key)
            if ref is None:
                self.count += 1
                ref = self.folded[node.key] = f"~fold{self.count}"
                self.constants[ref] = result
            typer.leaves[("const", ref)] = t
            leaf, value = f"(Const {encode_string(ref)})", None
        out = [f"(union {handle} {leaf})", f"(set (org_{leaf[1:]} {origin})"]
        return out + analysis_commands(handle, t, typer.table, typer.uses, typer.dims,
                                       is_const=True, value=value)
