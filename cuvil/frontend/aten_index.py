"""The aten -> Cuvil mapping of scans and advanced indexing: `cumsum`, `diff` (its `prepend`
and `append` a `cat`, its `n` repeated `diff`s), `index.Tensor` (index tensors on
adjacent dims) and `gather`. Part of `aten.ATEN` (see `aten` for what a converter is).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from cuvil.frontend.converter import Args, Value, need

if TYPE_CHECKING:
    from cuvil.frontend.importer import Importer


def cumsum(ix: Importer, a: Args) -> Value:
    """torch casts to `dtype` first, then sums (in i64 for an integer or bool input) and
    gives `dtype` (an i32 sum is the i64 one wrapped)."""
    from cuvil.ir.types import DType

    x, dtype = ix.tensor(a["input"]), a.get("dtype")
    want = None if dtype is None else str(DType.from_torch(dtype))
    if want is not None and ix.type(x).dtype != want:
        x = ix.add("cast", [x], {"dtype": want})
    y = ix.add("cumsum", [x], {"dim": a["dim"]})
    if want is not None and ix.type(y).dtype != want:
        y = ix.add("cast", [y], {"dtype": want})
    return y


def diff(ix: Importer, a: Args) -> Value:
    x, dim, n = ix.tensor(a["input"]), a.get("dim", -1), a.get("n", 1)
    need(isinstance(n, int) and n >= 0, "a symbolic n")
    ends = [ix.tensor(a[k]) if a.get(k) is not None else None for k in ("prepend", "append")]
    parts = [e for e in (ends[0], x, ends[1]) if e is not None]
    need(all(ix.type(p).dtype == ix.type(x).dtype for p in parts), "prepend/append dtypes")
    need(all(ix.type(p).rank == ix.type(x).rank for p in parts), "prepend/append ranks")
    if len(parts) > 1:
        x = ix.add("cat", parts, {"dim": dim})
    for _ in range(n):
        x = ix.add("diff", [x], {"dim": dim})
    return x


def index(ix: Importer, a: Args) -> Value:
    """`x[i, j]` with integer index tensors on adjacent dims (leading `None`s are `:`);
    bool masks (a data-dependent size) and index tensors apart stay in torch."""
    indices = list(a["indices"])
    while indices and indices[-1] is None:
        indices.pop()
    start = next((k for k, i in enumerate(indices) if i is not None), len(indices))
    picked = indices[start:]
    need(picked and all(isinstance(i, Value) for i in picked), "index tensors apart")
    need(all(ix.type(i).dtype.torch in (torch.int32, torch.int64) for i in picked),
         "a bool mask index")
    return ix.add("index", [ix.tensor(a["input"]), *picked], {"start": start})


def gather(ix: Importer, a: Args) -> Value:
    need(not a.get("sparse_grad"), "a sparse gradient")
    return ix.add("gather", [ix.tensor(a["input"]), ix.tensor(a["index"])], {"dim": a["dim"]})


INDEX_OPS = {"cumsum": cumsum, "diff": diff, "index": index, "gather": gather}
