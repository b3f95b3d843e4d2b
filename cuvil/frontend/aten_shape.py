"""The aten -> Cuvil mapping of shape ops: reshapes, views, permutes, squeezes, concatenation,
splits, slices. Part of `aten.ATEN` (see `aten` for what a converter is); a target shape is
the one torch computed for the node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from cuvil.frontend.converter import Args, Value, need

if TYPE_CHECKING:
    from cuvil.frontend.importer import Importer


def reshape(op: str) -> Callable:
    """reshape/view/unflatten/expand: the target shape is the one torch computed."""

    def convert(ix: Importer, a: Args) -> Value:
        need(not isinstance(a.get("dtype"), torch.dtype), "view as another dtype")
        return ix.add(op, [ix.tensor(a["input"])], {"shape": ix.out_shape()})

    return convert


def permute(ix: Importer, a: Args) -> Value:
    return ix.add("permute", [ix.tensor(a["input"])], {"dims": tuple(a["dims"])})


def flip(ix: Importer, a: Args) -> Value:
    need(len(a["dims"]) >= 1, "flip over no dims")
    return ix.add("flip", [ix.tensor(a["input"])], {"dims": tuple(a["dims"])})


def flatten(ix: Importer, a: Args) -> Value:
    return ix.add("flatten", [ix.tensor(a["input"])],
                  {"start_dim": a["start_dim"], "end_dim": a["end_dim"]})


def unsqueeze(ix: Importer, a: Args) -> Value:
    return ix.add("unsqueeze", [ix.tensor(a["input"])], {"dim": a["dim"]})


def squeeze(ix: Importer, a: Args) -> Value:
    """`squeeze()` drops every size-1 dim; `squeeze.dims` with no dims drops none."""
    dims = a.get("dim", ())
    dims = tuple(dims) if isinstance(dims, tuple) else (dims,)
    if "dim" in a and not dims:
        return ix.tensor(a["input"])
    return ix.add("squeeze", [ix.tensor(a["input"])], {"dim": dims})


def cat(ix: Importer, a: Args) -> Value:
    return ix.add("cat", [ix.tensor(t) for t in a["tensors"]], {"dim": a["dim"]})


def split(ix: Importer, a: Args) -> tuple:
    """split/split_with_sizes/chunk: one `slice` per piece (sizes as torch computed them)."""
    x = ix.tensor(a["input"])
    rank = ix.type(x).rank
    d = a["dim"] % rank
    pieces, start = [], 0
    for size in (t.shape[d] for t in ix.out_fakes()):
        size = ix.dims.dim(size)
        pieces.append(ix.add("slice", [x], {"dim": d, "start": start, "end": start + size}))
        start = start + size
    return tuple(pieces)


def unbind(ix: Importer, a: Args) -> tuple:
    """unbind: one `select` per index of a dim of static size (`q, k, v = qkv.unbind(0)`)."""
    x = ix.tensor(a["input"])
    d = a["dim"] % ix.type(x).rank
    size = ix.type(x).shape[d]
    need(isinstance(size, int), "unbind of a symbolic dim")
    return tuple(ix.add("select", [x], {"dim": d, "index": i}) for i in range(size))


def slice_(ix: Importer, a: Args) -> Value:
    x = ix.tensor(a["input"])
    start, end = a["start"] or 0, a["end"]
    if isinstance(end, int) and end >= 2**62:
        end = None
    if isinstance(ix.type(x).shape[a["dim"]], int) and end is not None \
            and not isinstance(end, int):
        return positions(ix, x, a["dim"] % ix.type(x).rank, start, a["step"])
    return ix.add("slice", [x], {"dim": a["dim"], "start": start, "end": end, "step": a["step"]})


def positions(ix: Importer, x: Value, dim: int, start: Any, step: int) -> Value:
    """A symbolic end on a static dim (`position_ids[:, :seq]` of a fixed buffer): `slice`
    cannot state min(size, end), so the positions torch's length gives are an `arange`
    and picked by `index` (which checks them against the dim)."""
    need(isinstance(start, int) and start >= 0, "a negative or symbolic start")
    length = ix.out_shape()[dim]
    at = ix.add("arange", [], {"shape": (length,), "start": start, "step": step,
                               "dtype": "i64"})
    return ix.add("index", [x, at], {"start": dim})


def select(ix: Importer, a: Args) -> Value:
    need(isinstance(a["index"], int), "select at a symbolic index")
    return ix.add("select", [ix.tensor(a["input"])], {"dim": a["dim"], "index": a["index"]})


SHAPE_OPS: dict[str, Callable[[Importer, Args], Any]] = {
    "reshape": reshape("reshape"), "_unsafe_view": reshape("reshape"),
    "unflatten": reshape("reshape"), "view": reshape("view"), "expand": reshape("expand"),
    "expand_as": reshape("expand"), "view_as": reshape("view"), "reshape_as": reshape("reshape"),
    "permute": permute, "flip": flip, "flatten": flatten, "unsqueeze": unsqueeze,
    "squeeze": squeeze,
    "cat": cat, "split": split, "split_with_sizes": split, "chunk": split,
    "unbind": unbind, "slice": slice_, "select": select,
}
