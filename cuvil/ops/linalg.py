"""Matrix products. Primitive ops carry no bias: `linear` and friends are `.cvr` ops."""

from __future__ import annotations

import torch

from cuvil.ir.types import TensorType, numel
from cuvil.ops.draw import arith
from cuvil.ops.elementwise import broadcast_shapes
from cuvil.ops.registry import GEMM, OpDef, check, register


def _matmul_type(ts: list[TensorType], a) -> TensorType:
    x, y = ts
    check(x.rank >= 1 and y.rank >= 1, "matmul: inputs must have rank >= 1")
    check(x.dtype == y.dtype, f"matmul: dtypes differ ({x.dtype}, {y.dtype})")
    check(x.device == y.device, f"matmul: devices differ ({x.device}, {y.device})")
    xs = x.shape if x.rank > 1 else (1, *x.shape)
    ys = y.shape if y.rank > 1 else (*y.shape, 1)
    check(xs[-1] == ys[-2], f"matmul: inner dims differ ({xs[-1]} vs {ys[-2]})")
    batch = broadcast_shapes(xs[:-2], ys[:-2])
    shape = (*batch, *((xs[-2],) if x.rank > 1 else ()), *((ys[-1],) if y.rank > 1 else ()))
    return TensorType(shape, x.dtype, "", x.device)


def _matmul_flops(ts: list[TensorType], out: TensorType, a):
    k = ts[0].shape[-1]
    return 2 * numel(out.shape) * k


def _bmm_type(ts: list[TensorType], a) -> TensorType:
    check(ts[0].rank == 3 and ts[1].rank == 3, "bmm: inputs must have rank 3")
    check(ts[0].shape[0] == ts[1].shape[0], "bmm: batch dims differ")
    return _matmul_type(ts, a)


register(OpDef("matmul", ("x", "y"), (), _matmul_type, lambda xs, a: torch.matmul(*xs), GEMM,
               flops=_matmul_flops, doc="x @ y with torch.matmul's broadcasting",
               shapes=arith.matmul))
register(OpDef("bmm", ("x", "y"), (), _bmm_type, lambda xs, a: torch.bmm(*xs), GEMM,
               flops=_matmul_flops, doc="batched x @ y, both rank 3", shapes=arith.matmul))
