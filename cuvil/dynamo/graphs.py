"""One graph that Dynamo (or AOTAutograd) hands over, compiled by `cuvil.compile`.

The graph's inputs are tensors (parameters among them: Dynamo lifts them to inputs) and
sizes (`SymInt`s under `dynamic=True`). Cuvil compiles a module of the tensors alone,
`GraphForward`, which reads each size off the tensor dim it names, so Dynamo's symbolic
sizes become Cuvil's symbolic dims, named as Dynamo names them (`s77`). Outputs that are
not tensors (the sizes and `None`s AOTAutograd passes between forward and backward) are
computed here, on the Python side, and an output that is an input itself (a weight the
forward saves for the backward) is that input, not a copy. If the dims cannot stay
symbolic, each new set of input shapes is compiled static. Anything Cuvil refuses, at
compile time or at call time, runs the graph as it was given, with one warning.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from torch import fx
from torch.export import Dim

from cuvil.dynamo.layouts import logical
from cuvil.errors import CuvilError

COUNTS: Counter = Counter()  # "compiles": graphs Cuvil compiled; "eager": graphs it refused;
# "direct": training graphs called without AOTAutograd's runtime (direct.py)


@dataclass(frozen=True)
class Size:
    """A size read off dim `dim` of tensor input `tensor`."""

    tensor: int
    dim: int

    def of(self, tensors: Sequence[Any]) -> int:
        return tensors[self.tensor].shape[self.dim]


class GraphForward(torch.nn.Module):
    """`gm` as a module of its tensor inputs alone, one argument each (torch.export's spec
    maps them one by one): each other input is a `Size` read off them or a constant; only
    the tensor outputs (positions `keep`) are returned. A tensor input with an order in
    `orders` comes as its memory in row-major order and is permuted back first
    (`layouts.dense_order`)."""

    def __init__(self, gm: fx.GraphModule, sources: list[Any], keep: list[int],
                 orders: Sequence[tuple[int, ...] | None] = ()):
        super().__init__()
        self.gm = gm
        self.sources = sources
        self.keep = keep
        count = sum(isinstance(s, Tensor) for s in sources)
        self.orders = list(orders) or [None] * count

        def forward(*tensors):
            tensors = [logical(t, o) for t, o in zip(tensors, self.orders, strict=True)]
            args = [_value(s, tensors) for s in self.sources]
            out = self.gm(*args)
            return tuple(out[i] for i in self.keep)

        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter(f"t{i}", kind) for i in range(count)])
        self.forward = forward


@dataclass(frozen=True)
class Expr:
    """A size computed from sizes read off the tensor inputs (`s0 // 2`)."""

    expr: Any
    sizes: dict[Any, Size]

    def of(self, tensors: Sequence[Any]) -> int:
        return int(self.expr.xreplace({s: sympy.Integer(size.of(tensors))
                                       for s, size in self.sizes.items()}))


@dataclass(frozen=True)
class Passed:
    """An output that is the graph's input `position` itself (a weight the forward graph
    saves for the backward): returned as it is, never copied."""

    position: int


class Tensor:
    """Source of a placeholder that is the `index`-th tensor input."""

    def __init__(self, index: int):
        self.index = index


def _value(source: Any, tensors: Sequence[Any]) -> Any:
    if isinstance(source, Tensor):
        return tensors[source.index]
    if isinstance(source, Size | Expr):
        return source.of(tensors)
    return source


def _meta(node: fx.Node) -> Any:
    return node.meta.get("val", node.meta.get("example_value"))


def _expr(size: Any) -> Any:
    return size.node.expr if isinstance(size, torch.SymInt) else None


def placeholder_metas(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> list[Any]:
    """Each placeholder's fake value (its example input where the graph has none)."""
    nodes = [n for n in gm.graph.nodes if n.op == "placeholder"]
    metas = [_meta(n) for n in nodes]
    return [x if m is None else m for m, x in zip(metas, example_inputs, strict=True)]


def sources_of(metas: list[Any]) -> tuple[list[Any], dict[Any, Size]]:
    """Where each placeholder's value comes from (a `Tensor`, a `Size` or a constant), and
    the dim that each of Dynamo's size symbols is read off."""
    sources: list[Any] = []
    dims: dict[Any, Size] = {}
    for meta in metas:
        if isinstance(meta, torch.Tensor):
            index = sum(isinstance(s, Tensor) for s in sources)
            for d, size in enumerate(meta.shape):
                if _expr(size) is not None:
                    dims.setdefault(_expr(size), Size(index, d))
            sources.append(Tensor(index))
        else:
            sources.append(meta)
    return [plain(s, dims, f"input {i}") for i, s in enumerate(sources)], dims


def plain(value: Any, dims: dict[Any, Size], what: str) -> Any:
    """`value` (no tensor) as a `Size`, an int or a constant."""
    if isinstance(value, Tensor) or value is None or isinstance(value, int | float | bool):
        return value
    if isinstance(value, torch.SymInt):
        expr = _expr(value)
        if expr.is_Integer:
            return int(expr)
        if expr in dims:
            return dims[expr]
        if expr.free_symbols <= dims.keys():
            return Expr(expr, {s: dims[s] for s in expr.free_symbols})
        raise CuvilError(f"size {what} ({expr}) is no function of the tensor inputs' dims")
    raise CuvilError(f"{what} is a {type(value).__name__}")


def outputs_of(gm: fx.GraphModule, dims: dict[Any, Size]) -> tuple[list[int], list[Any]]:
    """(positions of the tensor outputs Cuvil computes, each other output's source or
    None): a size, a constant, or `Passed` for an output that is an input itself."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    values = output.args[0]
    if not isinstance(values, tuple | list):
        raise CuvilError("a graph whose output is not a tuple")
    inputs = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    keep, rest = [], []
    for i, v in enumerate(values):
        meta = _meta(v) if isinstance(v, fx.Node) else v
        if isinstance(v, fx.Node) and v in inputs:
            rest.append(Passed(inputs[v]))
        elif isinstance(meta, torch.Tensor):
            keep.append(i)
            rest.append(None)
        else:
            rest.append(plain(meta, dims, f"output {i}"))
    return keep, rest


def dynamic_spec(metas: list[Any], auto: bool = False) -> tuple | None:
    """torch.export's spec: each dim Dynamo left symbolic, as a `Dim` of its symbol's name
    (a dim of a compound size, and with `auto` every dim, is `Dim.AUTO`); None if every dim
    is static."""
    named: dict[str, Any] = {}
    spec = []
    for meta in metas:
        if not isinstance(meta, torch.Tensor):
            continue
        dims = {}
        for d, size in enumerate(meta.shape):
            expr = _expr(size)
            if expr is None or expr.is_Integer:
                continue
            named_dim = expr.is_Symbol and not auto
            dims[d] = named.setdefault(str(expr), Dim(str(expr), min=2)) if named_dim \
                else Dim.AUTO
        spec.append(dims or None)
    return tuple(spec) if any(spec) else None
