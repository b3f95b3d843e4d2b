"""The ONNX -> Cuvil mapping of scans and advanced indexing, part of `ops.ONNX`.

`CumSum` is the catalog's `cumsum` along the (import-time) axis; `exclusive=1` subtracts
the input from it; `reverse=1` sums the input flipped along the axis and flips the sum
back, each flip an `index` by `arange(n, start=-1, step=-1)` (the negative indices -1 ...
-n, which need no n, symbolic or not). An integer input keeps its own dtype (the catalog
sums integers in i64). `GatherND` is advanced indexing, `data[i[..., 0], i[..., 1], ...]`:
the catalog's `index` from dim 0 with one index tensor per entry of the indices' last
(static) dim; with `batch_dims=b` an `arange` over each of the first b dims, shaped to
broadcast along its own dim of the indices, comes first. `Range` with a symbolic
limit (a static one folds at import), a static start and a step of 1 is the catalog's
`arange` of the symbolic length `limit - start`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cuvil.frontend.converter import Value
from cuvil.ir.types import is_static
from cuvil.onnx.importer import need, np_dtype

if TYPE_CHECKING:
    from cuvil.onnx.importer import OnnxImporter

Names = list[str]


def cumsum(ix: OnnxImporter, xs: Names) -> Value:
    axis = ix.constant(xs, 1)
    need(axis is not None and axis.size == 1, "an axis computed at run time")
    x = ix.tensor(xs[0])
    dtype = ix.type(x).dtype
    dim = int(axis.reshape(())) % max(ix.type(x).rank, 1)
    reverse = bool(ix.attrs.get("reverse", 0))
    if reverse:
        x = _flip(ix, x, dim)
    y = ix.add("cumsum", [x], {"dim": dim})
    if ix.type(y).dtype != dtype:
        y = ix.add("cast", [y], {"dtype": dtype.value})
    if ix.attrs.get("exclusive", 0):
        y = ix.add("sub", [y, x])
    return _flip(ix, y, dim) if reverse else y


def _flip(ix: OnnxImporter, x: Value, dim: int) -> Value:
    """`x` reversed along `dim`: indexed by -1, -2, ..., -n."""
    n = ix.type(x).shape[dim]
    backwards = ix.add("arange", [], {"shape": (n,), "start": -1, "step": -1, "dtype": "i64"})
    return ix.add("index", [x, backwards], {"start": dim})


def gather_nd(ix: OnnxImporter, xs: Names) -> Value:
    data, indices = ix.tensor(xs[0]), ix.tensor(xs[1])
    shape = ix.type(indices).shape
    batch = ix.attrs.get("batch_dims", 0)
    need(len(shape) >= batch + 1 and is_static(shape[-1]),
         "indices whose last dim is not static")
    need(batch + shape[-1] <= ix.type(data).rank, "more indices than the data's rank")
    batches = [_along(ix, shape[j], j, len(shape) - 1) for j in range(batch)]
    picks = [ix.add("select", [indices], {"dim": -1, "index": j}) for j in range(shape[-1])]
    return ix.add("index", [data, *batches, *picks], {"start": 0})


def _along(ix: OnnxImporter, n, dim: int, rank: int) -> Value:
    """0, 1, ..., n - 1 along `dim` of a rank-`rank` tensor whose other dims are 1."""
    ramp = ix.add("arange", [], {"shape": (n,), "dtype": "i64"})
    for d in [*range(dim), *range(dim + 1, rank)]:
        ramp = ix.add("unsqueeze", [ramp], {"dim": d})
    return ramp


def range_(ix: OnnxImporter, xs: Names) -> Value:
    start, limit, delta = (ix.constant(xs, i) for i in range(3))
    need(limit is not None, "a limit computed at run time")
    need(start is not None and is_static(start.item()), "a start not known at import")
    need(delta is not None and delta.item() == 1, "a step other than 1")
    length = limit.item() - start.item()
    return ix.add("arange", [], {"shape": (length,), "start": start.item(),
                                 "dtype": str(np_dtype(start.dtype))})


INDEX_OPS = {"CumSum": cumsum, "GatherND": gather_nd, "Range": range_}
