"""Scans and advanced indexing: `cumsum`, `diff`, `index` (torch's `x[i, j]` with index
tensors) and `gather`, the ops transformers' mask builders use on position ids.

`cumsum` sums as torch's CPU kernel does (a float in f64, an integer or bool in i64, the
result in the input's float dtype or i64). `diff` is the first difference along a dim (a
bool's is `!=`); torch's `prepend`/`append` and `n > 1` are a `cat` and repeated `diff`s at
import. `index` takes index tensors for the dims `start`, `start + 1`, ...: they broadcast
together, and their shape takes those dims' place (torch's rule for adjacent indices).
`gather` is `torch.gather`: an index of the input's rank, no larger than it off `dim`.
"""

from __future__ import annotations

import sympy
import torch

from cuvil.ir.types import DType, TensorType
from cuvil.ops.draw import index as draw
from cuvil.ops.reduce import norm_dims
from cuvil.ops.registry import MISC, AttrSpec, OpDef, check, register

INDEX_DTYPES = (DType.i32, DType.i64)


def _cumsum_type(ts: list[TensorType], a) -> TensorType:
    x = ts[0]
    norm_dims(a["dim"], x.rank, "cumsum")
    dtype = x.dtype if x.dtype.is_float else DType.i64
    return TensorType(x.shape, dtype, "", x.device)


register(OpDef("cumsum", ("x",), (AttrSpec("dim", "int"),), _cumsum_type,
               lambda xs, a: torch.cumsum(xs[0], a["dim"]), MISC, lowering="scan",
               doc="running sum along dim (integers and bools sum in i64)", shapes=draw.cumsum))


def _diff_type(ts: list[TensorType], a) -> TensorType:
    x = ts[0]
    check(x.rank >= 1, "diff: input must have rank >= 1")
    d = norm_dims(a["dim"], x.rank, "diff")[0]
    size = x.shape[d]
    size = max(size - 1, 0) if isinstance(size, int) else sympy.sympify(size) - 1
    shape = (*x.shape[:d], size, *x.shape[d + 1:])
    return TensorType(shape, x.dtype, "", x.device)


register(OpDef("diff", ("x",), (AttrSpec("dim", "int", -1),), _diff_type,
               lambda xs, a: torch.diff(xs[0], dim=a["dim"]), MISC, lowering="scan",
               doc="x[i + 1] - x[i] along dim (for bools: x[i + 1] != x[i])", shapes=draw.diff))


def _index_type(ts: list[TensorType], a) -> TensorType:
    from cuvil.ops.elementwise import broadcast_shapes

    x, idx = ts[0], ts[1:]
    start = a["start"]
    check(start >= 0 and start + len(idx) <= x.rank,
          f"index: {len(idx)} index tensor(s) from dim {start} on a rank-{x.rank} input")
    check(all(t.dtype in INDEX_DTYPES for t in idx), "index: indices must be i32 or i64")
    picked = broadcast_shapes(*(t.shape for t in idx))
    shape = (*x.shape[:start], *picked, *x.shape[start + len(idx):])
    return TensorType(shape, x.dtype, "", x.device)


def _index(xs: list[torch.Tensor], a) -> torch.Tensor:
    return xs[0][(slice(None),) * a["start"] + tuple(xs[1:])]


register(OpDef("index", ("x", "index"), (AttrSpec("start", "int", 0),), _index_type, _index,
               MISC, variadic=True, lowering="index", flops=lambda ts, out, a: 0,
               doc="x[:, ..., i0, i1, ...]: index tensors for the dims from start on, "
                   "broadcast together", shapes=draw.index))


def _gather_type(ts: list[TensorType], a) -> TensorType:
    x, idx = ts
    check(idx.rank == x.rank, "gather: index and input ranks differ")
    check(idx.dtype is DType.i64, "gather: indices must be i64")
    d = norm_dims(a["dim"], x.rank, "gather")[0] if x.rank else 0
    check(all(not (isinstance(i, int) and isinstance(n, int)) or i <= n
              for k, (i, n) in enumerate(zip(idx.shape, x.shape, strict=True)) if k != d),
          "gather: index larger than the input off dim")
    return TensorType(idx.shape, x.dtype, "", x.device)


register(OpDef("gather", ("x", "index"), (AttrSpec("dim", "int"),), _gather_type,
               lambda xs, a: torch.gather(xs[0], a["dim"], xs[1]), MISC, lowering="index",
               flops=lambda ts, out, a: 0,
               doc="out[i][j] = x[i][index[i][j]] along dim (torch.gather)", shapes=draw.gather))
