"""The ONNX -> Cuvil mapping of scans and advanced indexing, part of `ops.ONNX`.

`CumSum` is the catalog's `cumsum` along the (import-time) axis; `exclusive=1` subtracts
the input from it, `reverse=1` is not mapped (the catalog has no flip). An integer input
keeps its own dtype (the catalog sums integers in i64). `GatherND` with `batch_dims=0` is
advanced indexing, `data[i[..., 0], i[..., 1], ...]`: the catalog's `index` from dim 0 with
one index tensor per entry of the indices' last (static) dim. `Range` with a symbolic
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
    need(not ix.attrs.get("reverse", 0), "reverse=1")
    axis = ix.constant(xs, 1)
    need(axis is not None and axis.size == 1, "an axis computed at run time")
    x = ix.tensor(xs[0])
    dtype = ix.type(x).dtype
    y = ix.add("cumsum", [x], {"dim": int(axis.reshape(()))})
    if ix.type(y).dtype != dtype:
        y = ix.add("cast", [y], {"dtype": dtype.value})
    if ix.attrs.get("exclusive", 0):
        y = ix.add("sub", [y, x])
    return y


def gather_nd(ix: OnnxImporter, xs: Names) -> Value:
    need(ix.attrs.get("batch_dims", 0) == 0, "batch_dims other than 0")
    data, indices = ix.tensor(xs[0]), ix.tensor(xs[1])
    shape = ix.type(indices).shape
    need(len(shape) >= 1 and is_static(shape[-1]), "indices whose last dim is not static")
    need(shape[-1] <= ix.type(data).rank, "more indices than the data's rank")
    picks = [ix.add("select", [indices], {"dim": -1, "index": j}) for j in range(shape[-1])]
    return ix.add("index", [data, *picks], {"start": 0})


def range_(ix: OnnxImporter, xs: Names) -> Value:
    start, limit, delta = (ix.constant(xs, i) for i in range(3))
    need(limit is not None, "a limit computed at run time")
    need(start is not None and is_static(start.item()), "a start not known at import")
    need(delta is not None and delta.item() == 1, "a step other than 1")
    length = limit.item() - start.item()
    return ix.add("arange", [], {"shape": (length,), "start": start.item(),
                                 "dtype": str(np_dtype(start.dtype))})


INDEX_OPS = {"CumSum": cumsum, "GatherND": gather_nd, "Range": range_}
