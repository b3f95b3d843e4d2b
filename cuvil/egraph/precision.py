"""Which precision extraction chose for each product it could have computed in int8 or
fp16, and why.

An e-class that holds an int8 e-node (`matmul_i8`, `conv2d_i8`, or a `.cvr` op whose body
computes one) or an fp16 one (a GEMM or convolution kernel reading an f16 value, the
layers of `targets/cuda/fp16.cvr`) also holds the fp32 e-nodes it is equal to.
Extraction priced the whole graph; this reads its choice back: the op chosen, the cheapest
low-precision and fp32 alternatives with their costs (each down to the f32 values both
read, so the int8 one pays for quantizing its activations, the fp16 one for casting them),
the rule that made the low-precision one and the error it declares (`approx`). The line
compares the two costs as they are: where extraction chose the dearer one here (the graph
around it paid for it), it says so.

    v3 (digits.py:54): int8 qlinear_relu 3.1 us < fp32 linear_relu 6.2 us
        by linear_relu_int8 (rules/quantize/int8.cvr:26), |error| <= dim(x, -1) * (...)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from cuvil.dsl import ast
from cuvil.ir.types import DType
from cuvil.ops import registry

INT8_OPS = ("matmul_i8", "conv2d_i8")
HALF_KERNELS = ("gemm", "conv")  # kernel families whose f16 operands make an fp16 layer
NARROWING = ("quantize", "cast")  # ops that turn an f32 value into a low-precision one


@dataclass(frozen=True)
class Alternative:
    op: str
    cost: float  # us, the e-node's own cost
    rule: str = ""  # the rule that made it ("" for an imported node)


@dataclass(frozen=True)
class PrecisionChoice:
    node: str  # the imported node whose value this is
    source: str
    chosen: str  # "int8", "fp16" or "fp32"
    low: Alternative  # the cheapest low-precision alternative
    fp32: Alternative | None
    rule_where: str = ""
    tolerance: str = ""
    precision: str = "int8"  # the low alternative's: "int8" or "fp16"

    def __str__(self) -> str:
        where = f" ({self.source})" if self.source else ""
        alt = f"fp32 {self.fp32.op} {self.fp32.cost:.1f} us" if self.fp32 else "no fp32 form"
        q = f"{self.precision} {self.low.op} {self.low.cost:.1f} us"
        line = f"{self.node}{where}: " + self._comparison(q, alt)
        bound = f", |error| <= {self.tolerance}" if self.tolerance else ""
        return f"{line}\n    by {self.low.rule} ({self.rule_where}){bound}"

    def _comparison(self, q: str, alt: str) -> str:
        """The choice and the two costs, compared as printed (to 0.1 us)."""
        if self.fp32 is None:
            return f"{q}, {alt}" if self.chosen != "fp32" else f"{alt} kept, not {q}"
        int8, fp32 = round(self.low.cost, 1), round(self.fp32.cost, 1)
        whole = "(extraction priced the whole graph)"
        if self.chosen != "fp32":
            if int8 > fp32:
                return f"{q} chosen though {alt} is cheaper here {whole}"
            return f"{q} {'<' if int8 < fp32 else '='} {alt}"
        if int8 < fp32:
            return f"{alt} kept though {q} is cheaper here {whole}"
        return f"{alt} kept: {q} is {'dearer' if int8 > fp32 else 'no cheaper'}"


def precision_choices(session, selection, costs) -> list[PrecisionChoice]:
    """One line per e-class of the result that has an int8 or fp16 alternative. An alternative
    costs its e-node and whatever else it needs below it, down to the values the
    low-precision e-node reads (a float `relu` pays for the `linear` under it)."""
    snap, typer = session.snapshot, session.typer
    imported = {snap.let_class[h]: n for n, h in session.encoding.handles.items()}
    rules = {r.label: r for r in session.library.rules}
    own = _Costs(snap, typer, session.folder, costs)
    picks = {cls: snap.nodes[chosen.id] for cls, chosen in selection.choice.items()}
    kind = functools.partial(_precision, snap, typer, session.defs)
    picks |= _narrowed(snap, typer, picks, kind)
    out = []
    for cls, chosen in picks.items():
        nodes = [snap.nodes[i] for i in snap.classes[cls]
                 if snap.nodes[i].key not in typer.rejected]
        quantized = [n for n in nodes if kind(n)]
        if not quantized or cls not in imported:
            continue
        stop = _float_inputs(snap, typer, quantized)
        options = [(own.alternative(n, stop), kind(n)) for n in nodes]
        best_low, precision = min(((a, k) for a, k in options if a and k),
                                  key=lambda ak: ak[0].cost)
        fp32 = [a for a, k in options if a and not k]
        node = session.graph[imported[cls]]
        rule = rules.get(best_low.rule)
        out.append(PrecisionChoice(
            node.name, node.source, kind(chosen) or "fp32", best_low,
            min(fp32, key=lambda a: a.cost, default=None), rule.where if rule else "",
            ast.show(rule.tolerance) if rule and rule.tolerance else "", precision))
    return out


def _precision(snap, typer, defs: dict[str, Any], node) -> str:
    """"int8" or "fp16" for an e-node computing a product in that precision, else ""."""
    opdef = typer.ctors[node.ctor][0]
    if _is_int8(opdef, defs):
        return "int8"
    if opdef.kernel in HALF_KERNELS and any(
            c in snap.ty and typer.table.types[snap.ty[c]].dtype is DType.f16
            for c in node.children):
        return "fp16"
    return ""


def _narrowed(snap, typer, picks: dict, kind) -> dict:
    """Layers whose own value the result never reads, only its int8 requantization
    (`requant.cvr`) or its f16 cast (`fp16.cvr`'s f16-output forms), computed by a kernel
    writing that form: the narrowing op's input class -> that e-node. (Their value's class
    is not in the selection.)"""
    found = {}
    for cls, node in picks.items():
        if not kind(node):
            continue
        for i in snap.classes[cls]:
            other = snap.nodes[i]
            if typer.ctors[other.ctor][0].name in NARROWING and other.children and \
                    other.children[0] not in picks:
                found[other.children[0]] = node
    return found


@dataclass
class _Costs:
    snap: Any
    typer: Any
    folder: Any
    costs: Any
    memo: dict = field(default_factory=dict)  # (class, stop) -> cheapest tree cost

    def alternative(self, node, stop: frozenset[str]) -> Alternative | None:
        cost = self.tree(node, stop, frozenset())
        if cost is None:
            return None
        from cuvil.egraph.decode import origin_chain  # egglog: not for a cache hit's report

        chain = origin_chain(self.snap.origin.get(node.key, '""'))
        return Alternative(self.typer.decode(node)[0], cost, chain[0] if chain else "")

    def tree(self, node, stop: frozenset[str], seen: frozenset[str]) -> float | None:
        """The e-node's cost plus its children's cheapest, stopping at `stop` classes."""
        own = self.own(node)
        if own is None:
            return None
        total = own
        for c in node.children:
            if c in stop:
                continue
            if c in seen:
                return None
            if (c, stop) not in self.memo:
                best = [t for i in self.snap.classes[c]
                        if (t := self.tree(self.snap.nodes[i], stop, seen | {c})) is not None]
                self.memo[(c, stop)] = min(best, default=None)
            if self.memo[(c, stop)] is None:
                return None
            total += self.memo[(c, stop)]
        return total

    def own(self, node) -> float | None:
        snap, typer = self.snap, self.typer
        opdef = typer.ctors[node.ctor][0]
        if node.key in typer.rejected or node.cls not in snap.ty or \
                not all(c in snap.ty for c in node.children):
            return None
        out = typer.table.types[snap.ty[node.cls]]
        if opdef.kind == registry.LEAF or self.folder.foldable(node, out, typer):
            return 0.0  # computed at compile time
        op, attrs = typer.decode(node)
        ins = [typer.table.types[snap.ty[c]] for c in node.children]
        return self.costs.node_cost(op, attrs, ins, out)


def _float_inputs(snap, typer, quantized) -> frozenset[str]:
    """Where the alternatives' costs stop: the classes the low-precision e-nodes read,
    with each class that quantizes or casts a value replaced by that value (the narrowing
    is the low form's to pay, as extraction pays it)."""
    stop = set()
    for node in quantized:
        for c in node.children:
            quantizes = [snap.nodes[i].children[0] for i in snap.classes[c]
                         if typer.ctors[snap.nodes[i].ctor][0].name in NARROWING
                         and snap.nodes[i].children]
            stop.add(quantizes[0] if quantizes else c)
    return frozenset(stop)


def _is_int8(opdef, defs: dict[str, Any]) -> bool:
    """Whether the op computes an integer product: one of `INT8_OPS`, or a composite op
    whose body (through the composite ops it uses) calls one."""
    if opdef.name in INT8_OPS:
        return True
    if opdef.body is None:
        return False
    return any(call.op in INT8_OPS or (call.op in defs and _is_int8(defs[call.op], defs))
               for call in _calls(opdef.body.body))


def _calls(term):
    if isinstance(term, ast.Call):
        yield term
        for arg in term.args:
            yield from _calls(arg)
