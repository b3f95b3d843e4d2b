"""The ONNX -> Cuvil mapping of shape ops: Reshape, Flatten, Transpose, Concat, Slice,
Gather, Unsqueeze, Squeeze, Expand, Split, ConstantOfShape, Resize (nearest). Part of
`ops.ONNX` (see `ops` for what a converter is). Shapes, axes and indices must be known at
import (constants, or shape arithmetic `fold` computed); a target shape may hold symbolic
dims.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from cuvil.frontend.converter import Value
from cuvil.ir.types import dim, is_static, numel
from cuvil.onnx.fold import is_symbolic, to_dims
from cuvil.onnx.importer import need, np_dtype

if TYPE_CHECKING:
    from cuvil.onnx.importer import OnnxImporter

Names = list[str]
_END = 2**62  # an end at or past this is "to the end"


def known_as(ix: OnnxImporter, name: str, arr: np.ndarray) -> str:
    """Register `arr` as the known value `name` (a constant derived at import)."""
    ix.known.setdefault(name, arr)
    return name


def axes(ix: OnnxImporter, xs: Names, i: int, key: str = "axes") -> list[int] | None:
    """Axes given as input `i` (newer opsets; known at import) or as attribute `key`."""
    if i < len(xs) and xs[i]:
        known = ix.constant(xs, i)
        need(known is not None, f"{key} computed at run time")
        return [int(a) for a in known.reshape(-1)]
    value = ix.attrs.get(key)
    return None if value is None else [int(a) for a in value]


def known_dims(ix: OnnxImporter, xs: Names, i: int, what: str) -> tuple:
    known = ix.constant(xs, i)
    need(known is not None, f"a {what} computed at run time is not mapped")
    return to_dims(known)


def reshape(ix: OnnxImporter, xs: Names) -> Value:
    x = ix.tensor(xs[0])
    source = ix.type(x).shape
    shape = list(known_dims(ix, xs, 1, "target shape"))
    if not ix.attrs.get("allowzero"):
        shape = [source[i] if is_static(d) and d == 0 else d for i, d in enumerate(shape)]
    holes = [i for i, d in enumerate(shape) if is_static(d) and d == -1]
    if holes:
        rest = numel(tuple(d for i, d in enumerate(shape) if i != holes[0]))
        shape[holes[0]] = dim(sympy.simplify(sympy.sympify(numel(source)) / rest))
    return ix.add("reshape", [x], {"shape": tuple(shape)})


def flatten(ix: OnnxImporter, xs: Names) -> Value:
    x = ix.tensor(xs[0])
    shape = ix.type(x).shape
    axis = ix.attrs.get("axis", 1) % (len(shape) + 1)
    if axis == 1 and len(shape) > 1:
        return ix.add("flatten", [x], {"start_dim": 1, "end_dim": -1})
    return ix.add("reshape", [x], {"shape": (numel(shape[:axis]), numel(shape[axis:]))})


def transpose(ix: OnnxImporter, xs: Names) -> Value:
    """A swap of two dims is `transpose` (as aten's), any other order `permute`."""
    x = ix.tensor(xs[0])
    rank = ix.type(x).rank
    perm = [p % rank for p in ix.attrs.get("perm", range(rank - 1, -1, -1))]
    moved = [i for i, p in enumerate(perm) if p != i]
    if not moved:
        return x
    if len(moved) == 2:
        return ix.add("transpose", [x], {"dim0": moved[0], "dim1": moved[1]})
    return ix.add("permute", [x], {"dims": tuple(perm)})


def concat(ix: OnnxImporter, xs: Names) -> Value:
    return ix.add("cat", [ix.tensor(n) for n in xs if n], {"dim": ix.attrs["axis"]})


def slice_(ix: OnnxImporter, xs: Names) -> Value:
    x = ix.tensor(xs[0])
    starts, ends = known_dims(ix, xs, 1, "slice start"), known_dims(ix, xs, 2, "slice end")
    dims = axes(ix, xs, 3) or list(range(len(starts)))
    steps = known_dims(ix, xs, 4, "slice step") if len(xs) > 4 and xs[4] else (1,) * len(dims)
    for d, start, end, step in zip(dims, starts, ends, steps, strict=True):
        need(is_static(step) and step >= 1, f"slice step {step} is not mapped")
        size = ix.type(x).shape[d]
        if is_static(end) and end >= _END:
            end = None
        if is_static(size):
            need(is_static(start) and (end is None or is_static(end)),
                 "a symbolic slice bound on a static dim")
            start, end, _ = slice(start, end, step).indices(size)
        elif is_static(start) and start < 0 or is_static(end) and end is not None and end < 0:
            start, end = (size + b if is_static(b) and b is not None and b < 0 else b
                          for b in (start, end))
        if start == 0 and end in (None, size) and step == 1:
            continue
        x = ix.add("slice", [x], {"dim": d, "start": start, "end": end, "step": step})
    return x


def gather(ix: OnnxImporter, xs: Names) -> Value:
    """A known index is `select`; token ids into a weight along axis 0 are `embedding`."""
    axis, indices = ix.attrs.get("axis", 0), ix.constant(xs, 1)
    if indices is not None and not is_symbolic(indices) and indices.ndim == 0:
        return ix.add("select", [ix.tensor(xs[0])], {"dim": axis, "index": int(indices)})
    data = ix.tensor(xs[0])
    need(axis % ix.type(data).rank == 0 and ix.constant(xs, 0) is not None,
         "a Gather other than rows of a constant is not mapped")
    return ix.add("embedding", [data, ix.tensor(xs[1])])


def unsqueeze(ix: OnnxImporter, xs: Names) -> Value:
    x = ix.tensor(xs[0])
    dims = axes(ix, xs, 1)
    rank = ix.type(x).rank + len(dims)
    for d in sorted(a % rank for a in dims):
        x = ix.add("unsqueeze", [x], {"dim": d})
    return x


def squeeze(ix: OnnxImporter, xs: Names) -> Value:
    x = ix.tensor(xs[0])
    dims = axes(ix, xs, 1)
    if dims is None:
        dims = [i for i, d in enumerate(ix.type(x).shape) if is_static(d) and d == 1]
    return ix.add("squeeze", [x], {"dim": tuple(d % ix.type(x).rank for d in dims)})


def expand(ix: OnnxImporter, xs: Names) -> Value:
    """numpy broadcasting to a known shape: a 1 keeps the input's dim."""
    x = ix.tensor(xs[0])
    source, shape = ix.type(x).shape, known_dims(ix, xs, 1, "expand shape")
    rank = max(len(source), len(shape))
    source = (1,) * (rank - len(source)) + tuple(source)
    shape = (1,) * (rank - len(shape)) + tuple(shape)
    out = tuple(s if is_static(t) and t == 1 else t for s, t in zip(source, shape, strict=True))
    if rank > ix.type(x).rank:
        x = ix.add("reshape", [x], {"shape": source})
    return x if out == source else ix.add("expand", [x], {"shape": out})


def split(ix: OnnxImporter, xs: Names) -> tuple:
    x = ix.tensor(xs[0])
    d = ix.attrs.get("axis", 0) % ix.type(x).rank
    sizes = axes(ix, xs, 1, "split")
    if sizes is None:
        size, count = ix.type(x).shape[d], ix.attrs.get("num_outputs", len(ix.node.output))
        need(is_static(size), "an even Split of a symbolic dim")
        chunk = -(-size // count)
        sizes = [min(chunk, size - i * chunk) for i in range(count)]
    pieces, start = [], 0
    for size in sizes:
        pieces.append(ix.add("slice", [x], {"dim": d, "start": start, "end": start + size}))
        start += size
    return tuple(pieces)


def constant_of_shape(ix: OnnxImporter, xs: Names) -> Value:
    """A symbolic shape (a static one folds): the fill value expanded to it."""
    from onnx import numpy_helper

    value = ix.attrs.get("value")
    fill = numpy_helper.to_array(value).reshape(-1)[0] if value is not None else np.float32(0)
    scalar = Value(ix.graph.scalar(fill.item(), dtype=np_dtype(fill.dtype)))
    return ix.add("expand", [scalar], {"shape": known_dims(ix, xs, 0, "shape")})


def resize(ix: OnnxImporter, xs: Names) -> Value:
    """Nearest-neighbour upsampling by whole factors: each element repeated, written as
    reshape -> expand -> reshape (every coordinate mode picks the same source there)."""
    need(ix.attrs.get("mode", "nearest") == "nearest", f"{ix.attrs.get('mode')} resizing")
    x = ix.tensor(xs[0])
    shape = ix.type(x).shape
    scales, sizes = ix.constant(xs, 2), ix.constant(xs, 3)
    if sizes is not None and sizes.size:
        need(all(is_static(d) for d in shape), "resizing a symbolic dim to a size")
        scales = np.asarray(to_dims(sizes), dtype=np.float64) / np.asarray(shape)
    need(scales is not None and scales.size == len(shape), "scales computed at run time")
    need(all(float(f).is_integer() and f >= 1 for f in scales), f"scales {list(scales)} are "
         "not whole upsampling factors")
    factors = [int(f) for f in scales]
    split = tuple(d for size, f in zip(shape, factors, strict=True) for d in (size, 1))
    target = tuple(d for size, f in zip(shape, factors, strict=True) for d in (size, f))
    y = ix.add("expand", [ix.add("reshape", [x], {"shape": split})], {"shape": target})
    return ix.add("reshape", [y], {"shape": tuple(s * f for s, f in zip(shape, factors,
                                                                         strict=True))})


SHAPE_OPS: dict[str, Callable[[OnnxImporter, Names], Any]] = {
    "Reshape": reshape, "Flatten": flatten, "Transpose": transpose, "Concat": concat,
    "Slice": slice_, "Gather": gather, "Unsqueeze": unsqueeze, "Squeeze": squeeze,
    "Expand": expand, "Split": split, "ConstantOfShape": constant_of_shape, "Resize": resize,
}
