"""Reductions over a tuple of dims (empty: all dims), with or without `keepdim`: sum, mean,
amax, and the variance about the mean (`var`, with torch's `correction`)."""

from __future__ import annotations

import torch

from cuvil.ir.types import DType, TensorType, numel
from cuvil.ops.draw import arith
from cuvil.ops.registry import REDUCTION, AttrSpec, OpDef, check, register


def norm_dims(dims, rank: int, what: str) -> tuple[int, ...]:
    """Dims made non-negative and checked against `rank` (empty means every dim)."""
    dims = tuple(dims) if isinstance(dims, tuple | list) else (dims,)
    if not dims:
        return tuple(range(rank))
    out = []
    for d in dims:
        check(-max(rank, 1) <= d < max(rank, 1), f"{what}: dim {d} out of range for rank {rank}")
        out.append(d % rank if rank else 0)
    check(len(set(out)) == len(out), f"{what}: repeated dim")
    return tuple(sorted(out))


def _reduce_type(name: str, dtype_rule):
    def infer(ts: list[TensorType], a) -> TensorType:
        x = ts[0]
        dims = norm_dims(a["dim"], x.rank, name)
        if a["keepdim"]:
            shape = tuple(1 if i in dims else d for i, d in enumerate(x.shape))
        else:
            shape = tuple(d for i, d in enumerate(x.shape) if i not in dims)
        layout = x.layout if a["keepdim"] else ""
        return TensorType(shape, dtype_rule(x.dtype), layout, x.device)

    return infer


def _sum_dtype(d: DType) -> DType:
    return d if d.is_float else DType.i64


def _mean_dtype(d: DType) -> DType:
    check(d.is_float, f"mean: input must be float, not {d}")
    return d


def _ref(fn):
    def ref(xs, a):
        dims = norm_dims(a["dim"], xs[0].dim(), "reduce")
        return fn(xs[0], dim=dims, keepdim=a["keepdim"]) if dims else xs[0].clone()

    return ref


_ATTRS = (AttrSpec("dim", "ints", ()), AttrSpec("keepdim", "bool", False))
for _name, _fn, _rule in [("sum", torch.sum, _sum_dtype), ("mean", torch.mean, _mean_dtype),
                          ("amax", torch.amax, lambda d: d)]:
    register(OpDef(_name, ("x",), _ATTRS, _reduce_type(_name, _rule), _ref(_fn), REDUCTION,
                   flops=lambda ts, out, a: numel(ts[0].shape),
                   doc=f"{_name} over dim (empty: all dims)", shapes=arith.reduction))


def _var_type(ts: list[TensorType], a) -> TensorType:
    check(ts[0].dtype.is_float, f"var: input must be float, not {ts[0].dtype}")
    return _reduce_type("var", lambda d: d)(ts, a)


def _var(xs, a):
    dims = norm_dims(a["dim"], xs[0].dim(), "var")
    return torch.var(xs[0], dim=dims, correction=a["correction"], keepdim=a["keepdim"])


register(OpDef("var", ("x",), (*_ATTRS, AttrSpec("correction", "int", 1, samples=(0, 1))),
               _var_type, _var, REDUCTION, flops=lambda ts, out, a: 3 * numel(ts[0].shape),
               doc="sum((x - mean(x))^2) / (n - correction) over dim (empty: all dims), "
                   "n the count of values reduced: batch norm's statistics",
               shapes=arith.reduction))
