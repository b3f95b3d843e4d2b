"""The aten -> Cuvil mapping of batch norm: inference (`batch_norm`,
`_native_batch_norm_legit_no_training`), training (`_native_batch_norm_legit_functional`,
`_native_batch_norm_legit` without running statistics) and its gradient
(`native_batch_norm_backward`), all from catalog ops.

Over every dim but the channels (dim 1), n values a channel, a training forward normalises
with the batch's own statistics and saves them:
    mean = mean(x), var = var(x, correction=0), y = batch_norm(x, weight, bias, mean, var)
    invstd = 1 / sqrt(var + eps)                          (saved with mean for the backward)
    running' = running * (1 - momentum) + batch * momentum (the variance's: var * n / (n - 1))
Its gradient, with x^ = (x - mean) * invstd:
    dweight = sum(dy * x^)        (the catalog's `batch_norm_weight_grad`), dbias = sum(dy)
    dx = invstd * weight * (dy - dbias / n - x^ * dweight / n)
A 16-bit input's statistics are f32 in torch's CPU kernel, and n must be known: otherwise the
op runs in torch.
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from cuvil.frontend.converter import Args, Value, need
from cuvil.ir.types import is_static

if TYPE_CHECKING:
    from cuvil.frontend.importer import Importer

_EXACT = ("f32", "f64")


def batch_norm(ix: Importer, a: Args) -> Value | tuple:
    """Any functional forward form; with the batch's statistics where `training` says so.
    `batch_norm` returns y alone, the others a tuple."""
    x = ix.tensor(a["input"])
    need(ix.type(x).rank >= 2, "batch_norm without a channel dim")
    single = "cudnn_enabled" in a
    if a.get("training", False):
        need(not single or a["running_mean"] is None, "running statistics written in place")
        out = _training(ix, a, x)
        return out[0] if single else out
    need(a.get("running_mean") is not None, "batch statistics")
    weight, bias = _affine(ix, a, x)
    y = ix.add("batch_norm", [x, weight, bias, ix.tensor(a["running_mean"]),
                              ix.tensor(a["running_var"])], {"eps": float(a["eps"])})
    return y if single else (y, None, None)


def _in_place(ix: Importer, a: Args) -> Value | tuple:
    """`_native_batch_norm_legit`: functional only without running statistics to update."""
    need(not a["training"] or a.get("running_mean") is None,
         "running statistics written in place")
    return batch_norm(ix, a)


def _training(ix: Importer, a: Args, x: Value) -> tuple:
    """(y, mean, invstd[, running mean, running var]) of a training forward."""
    n = _count(ix, x)
    need(n > 1 or a.get("running_mean") is None, "a batch of one value a channel")
    dims = {"dim": tuple(d for d in range(ix.type(x).rank) if d != 1), "keepdim": False}
    mean = ix.add("mean", [x], dims)
    var = ix.add("var", [x], {**dims, "correction": 0})
    eps = float(a["eps"])
    y = ix.add("batch_norm", [x, *_affine(ix, a, x), mean, var], {"eps": eps})
    invstd = ix.add("rsqrt", [ix.add("add", [var, ix.tensor(eps)])])
    if a.get("running_mean") is None:
        return y, mean, invstd
    unbiased = ix.add("mul", [var, ix.tensor(n / (n - 1))])
    return (y, mean, invstd, _moved(ix, a["running_mean"], mean, a["momentum"]),
            _moved(ix, a["running_var"], unbiased, a["momentum"]))


def batch_norm_backward(ix: Importer, a: Args) -> tuple:
    """(dx, dweight, dbias) of a training batch norm, as the module docstring gives them;
    None where `output_mask` skips one or the norm has no weight."""
    need(a["train"], "the gradient of an inference batch norm")
    x, dy = ix.tensor(a["input"]), ix.tensor(a["grad_out"])
    need(ix.type(dy).dtype == ix.type(x).dtype, "a gradient of another dtype")
    n = _count(ix, x)
    mean, invstd = ix.tensor(a["save_mean"]), ix.tensor(a["save_invstd"])
    dweight = ix.add("batch_norm_weight_grad", [dy, x, mean, invstd])
    dims = tuple(d for d in range(ix.type(x).rank) if d != 1)
    dbias = ix.add("sum", [dy], {"dim": dims, "keepdim": False})
    mask = a["output_mask"]
    dx = _input_grad(ix, a, (dy, x, mean, invstd, dweight, dbias), n) if mask[0] else None
    return (dx, dweight if mask[1] and a["weight"] is not None else None,
            dbias if mask[2] else None)


def _input_grad(ix: Importer, a: Args, values: tuple, n: int) -> Value:
    """dx = (dy - dbias / n - (x - mean) * (invstd * dweight / n)) * (invstd * weight): one
    elementwise chain over x's shape, its per-channel factors computed first."""
    dy, x, mean, invstd, dweight, dbias = values
    scale = invstd if a["weight"] is None else ix.add("mul", [invstd, ix.tensor(a["weight"])])
    shift = ix.add("mul", [dbias, ix.tensor(1.0 / n)])
    slope = ix.add("mul", [ix.add("mul", [invstd, dweight]), ix.tensor(1.0 / n)])
    rank = ix.type(x).rank
    centred = ix.add("sub", [x, _per_channel(ix, mean, rank)])
    g = ix.add("sub", [ix.add("sub", [dy, _per_channel(ix, shift, rank)]),
                       ix.add("mul", [centred, _per_channel(ix, slope, rank)])])
    return ix.add("mul", [g, _per_channel(ix, scale, rank)])


def _count(ix: Importer, x: Value) -> int:
    """n, the values a channel: the product of every dim but 1 (static, f32/f64 only)."""
    t = ix.type(x)
    need(t.dtype.name in _EXACT, "a 16-bit batch norm's statistics")
    others = [d for i, d in enumerate(t.shape) if i != 1]
    need(all(is_static(d) for d in others), "batch statistics over symbolic sizes")
    return prod(others)


def _affine(ix: Importer, a: Args, x: Value) -> tuple[Value, Value]:
    """The weight and bias; ones and zeros of x's dtype where the norm has none."""
    channels, dtype = (ix.type(x).shape[1],), ix.type(x).dtype
    return (ix.tensor(a["weight"]) if a["weight"] is not None else ix.filled(1.0, channels, dtype),
            ix.tensor(a["bias"]) if a["bias"] is not None else ix.filled(0.0, channels, dtype))


def _moved(ix: Importer, running: Value, batch: Value, momentum: float) -> Value:
    """running * (1 - momentum) + batch * momentum."""
    return ix.add("add", [ix.add("mul", [ix.tensor(running), ix.tensor(1.0 - momentum)]),
                          ix.add("mul", [batch, ix.tensor(float(momentum))])])


def _per_channel(ix: Importer, v: Value, rank: int) -> Value:
    """A [C] value as [C, 1, ...], to broadcast over dims 1.. of a rank-`rank` tensor."""
    if rank == 2:
        return v
    return ix.add("reshape", [v], {"shape": (ix.type(v).shape[0], *(1,) * (rank - 2))})


BATCH_NORM_OPS = {"batch_norm": batch_norm, "_native_batch_norm_legit_no_training": batch_norm,
                  "_native_batch_norm_legit": _in_place,
                  "_native_batch_norm_legit_functional": batch_norm,
                  "native_batch_norm_backward": batch_norm_backward}
