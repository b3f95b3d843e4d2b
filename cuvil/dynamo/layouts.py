"""Each tensor output of a graph in the memory layout the graph gives it.

Cuvil returns each output it computes in dense row-major memory of its own. A graph's
output may be laid out otherwise: a view into another value (k and v split from one q/k/v
projection, at an offset into it; a transposed weight) or a result in a permuted order.
The graph that reads it next (the backward graph reads what the forward saves) is traced
for that layout, and may reach the value through it (a `view` valid for those strides
alone, an `as_strided` at that offset). So an output that is a view is rebuilt as that view
of its root value: Cuvil computes the root (an extra output of the graph) or it is an
input, read and never written; an output laid out otherwise, dense, is copied into its
layout. Every other output is Cuvil's as it is. A row-major view is rebuilt the same way:
Cuvil would copy a view of its own value into an output of its own (a layer norm's result
the forward saves as its [rows, 256] view, the q/k/v projection saved whole).

An input laid out densely in a permuted order (a transposed weight the forward saves for
the backward) is passed to Cuvil as that memory in row-major order (`dense_order`), and
the graph permutes it back to its logical order first: Cuvil reads the memory as it is
instead of copying it into row-major order at each call, and the permute meets the
graph's own transpose of the input (`t(t(w))`), which the rules cancel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from cuvil.errors import CuvilError


@dataclass(frozen=True)
class ViewOf:
    """An output that is the view (`shape`, `stride`, `offset` elements into the root's
    storage, where the root starts at `root_offset`) of result `root`: a position among the
    graph's outputs, or `Passed` for an input. Each size is an int, a `Size` or an
    `Expr`."""

    root: Any
    shape: tuple
    stride: tuple
    offset: Any
    root_offset: Any


def laid_out(gm: fx.GraphModule, keep: list[int], rest: list[Any], plain: Any,
             passed: type) -> tuple[fx.GraphModule, list[int], list[Any], dict]:
    """(the graph with each view's root among its outputs, after the graph's own; the
    positions Cuvil computes; each output's source, a `ViewOf` for a view; the strides of
    each output Cuvil computes that the graph lays out densely but not row-major), from
    `outputs_of`'s `keep` and `rest`. `plain(size, what)` makes a size a source,
    `passed(position)` names an input."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    values = list(output.args[0])
    inputs = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    keep, rest, roots, strided = list(keep), list(rest), [], {}
    for i in list(keep):
        meta = _meta(values[i])
        root = view_root(values[i])
        view = _view_of(root, meta, plain, f"output {i}") \
            if root is not values[i] and (root in inputs or _row_major(_meta(root))) else None
        if view is not None:
            if root in inputs:
                source: Any = passed(inputs[root])
            else:
                roots += [] if root in values or root in roots else [root]
                source = values.index(root) if root in values \
                    else len(values) + roots.index(root)
                keep.append(source)
            keep.remove(i)
            rest[i] = ViewOf(source, *view)
        elif not _row_major(meta) and _dense(meta):
            strided[i] = tuple(plain(s, f"output {i}") for s in meta.stride())
    rest += [None] * len(roots)
    return (_with_outputs(gm, roots) if roots else gm), sorted(set(keep)), rest, strided


def view_root(node: Any) -> Any:
    """The value whose memory `node`'s value is a view into: the first op back along the
    first operand (through the op of several results a result is taken from: `split`,
    `unbind`) whose result shares that memory, and whose operand does not."""
    while isinstance(node, fx.Node) and node.op == "call_function" and node.args:
        source = node.args[0]
        if isinstance(source, fx.Node) and isinstance(_meta(source), list | tuple) \
                and source.args:
            source = source.args[0]
        if not (isinstance(source, fx.Node) and _shares_storage(_meta(source), _meta(node))):
            break
        node = source
    return node


def rebuilt(results: list[Any], inputs: Sequence[Any], strided: dict, count: int,
            size: Any) -> list[Any]:
    """The graph's `count` outputs from `results` (each output Cuvil computes, each other
    output's source), each `ViewOf` the view of its root, each output in `strided` copied
    into those strides; `size(s)` is the value of a size source."""
    out = list(results)
    for i, r in enumerate(results):
        if isinstance(r, ViewOf):
            root = results[r.root] if isinstance(r.root, int) else inputs[r.root.position]
            if isinstance(r.root, int) and not root.is_contiguous():
                raise CuvilError(f"the value output {i} is a view of is not row-major")
            offset = root.storage_offset() + size(r.offset) - size(r.root_offset)
            out[i] = root.as_strided([size(s) for s in r.shape],
                                     [size(s) for s in r.stride], offset)
    for i, stride in strided.items():
        copy = torch.empty_strided(out[i].shape, [size(s) for s in stride],
                                   dtype=out[i].dtype)
        out[i] = copy.copy_(out[i])
    return out[:count]


def reshapes(gm: fx.GraphModule, rest: list[Any]) -> dict[int, tuple[int, tuple]]:
    """{output: (root, shape)} for each `ViewOf` in `rest` that is all of a root Cuvil
    computes, in row-major order, its sizes static: `root.view(shape)` rebuilds it."""
    from torch._prims_common import make_contiguous_strides_for

    values = list(next(n for n in gm.graph.nodes if n.op == "output").args[0])
    found = {}
    for i, r in enumerate(rest):
        if not (isinstance(r, ViewOf) and isinstance(r.root, int)):
            continue
        root = _meta(values[r.root])
        sizes = (*r.shape, *r.stride, r.offset, r.root_offset)
        if isinstance(root, torch.Tensor) and all(type(s) is int for s in sizes) and \
                r.offset == r.root_offset and _row_major(root) and \
                root.numel() == math.prod(r.shape) and \
                r.stride == tuple(make_contiguous_strides_for(r.shape)):
            found[i] = (r.root, r.shape)
    return found


def dense_order(meta: Any) -> tuple[int, ...] | None:
    """The order of dims in which tensor `meta` is row-major (`meta.permute(order)` is
    contiguous, at any offset) where that is not the logical order, its sizes and strides
    static; else None."""
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    if not isinstance(meta, torch.Tensor) or meta.dim() < 2 or \
            not all(is_concrete_int(s) for s in (*meta.shape, *meta.stride())):
        return None
    sizes, strides = [int(s) for s in meta.shape], [int(s) for s in meta.stride()]
    order = tuple(sorted(range(len(sizes)), key=lambda d: (-strides[d], d)))
    step = 1
    for d in reversed(order):
        if sizes[d] != 1 and strides[d] != step:
            return None
        step *= sizes[d]
    return None if order == tuple(range(len(sizes))) else order


def logical(tensor: torch.Tensor, order: tuple[int, ...] | None) -> torch.Tensor:
    """The tensor whose row-major `tensor` is in `order` (`dense_order`), in its logical
    order of dims."""
    if order is None:
        return tensor
    inverse = sorted(range(len(order)), key=order.__getitem__)
    return tensor.permute(inverse)


def _view_of(root: fx.Node, meta: torch.Tensor, plain: Any, what: str) -> tuple | None:
    """`ViewOf`'s fields after its root: `meta`'s view of `root`'s memory, each size a
    source; None where a row-major output has a size that is none (Cuvil computes it, as a
    copy of the view); a view laid out otherwise must have them."""
    try:
        return (tuple(plain(s, what) for s in meta.shape),
                tuple(plain(s, what) for s in meta.stride()),
                plain(meta.storage_offset(), what), plain(_meta(root).storage_offset(), what))
    except CuvilError:
        if _row_major(meta):
            return None
        raise


def _with_outputs(gm: fx.GraphModule, roots: list[fx.Node]) -> fx.GraphModule:
    """A copy of `gm` that returns `roots` after its own outputs."""
    graph = fx.Graph()
    copies: dict[fx.Node, fx.Node] = {}
    values = graph.graph_copy(gm.graph, copies)
    graph.output(tuple(values) + tuple(copies[r] for r in roots))
    return fx.GraphModule(gm, graph)


def _meta(node: Any) -> Any:
    if not isinstance(node, fx.Node):
        return None
    return node.meta.get("val", node.meta.get("example_value"))


def _row_major(meta: Any) -> bool:
    """Whether `meta` is a tensor laid out as Cuvil returns one (or no tensor at all)."""
    from torch.fx.experimental.symbolic_shapes import guard_or_false

    if not isinstance(meta, torch.Tensor):
        return True
    return guard_or_false(meta.storage_offset() == 0) and \
        bool(meta.is_contiguous(memory_format=torch.contiguous_format))


def _dense(meta: torch.Tensor) -> bool:
    from torch._prims_common import is_non_overlapping_and_dense_or_false
    from torch.fx.experimental.symbolic_shapes import guard_or_false

    return guard_or_false(meta.storage_offset() == 0) and \
        is_non_overlapping_and_dense_or_false(meta)


def _shares_storage(a: Any, b: Any) -> bool:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    try:
        return a.untyped_storage()._cdata == b.untyped_storage()._cdata
    except (NotImplementedError, RuntimeError):
        return False
