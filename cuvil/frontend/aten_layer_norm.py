"""The aten -> Cuvil mapping of layer norm: `layer_norm`, `native_layer_norm` (its output,
and the mean and reciprocal standard deviation a training forward saves) and
`native_layer_norm_backward`, all from catalog ops, for f32 and f64 inputs.

With x^ = (x - mean) * rstd over the normalized (last) dims and g = dy * weight:
    dx = rstd * (g - mean(g) - x^ * mean(g * x^))      (the catalog's `layer_norm_grad`)
    dweight = sum(dy * x^), dbias = sum(dy)             (sums over the leading dims)
A 16-bit input's statistics are f32 in torch's CPU kernel: they run in torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cuvil.frontend.converter import Args, Value, need

if TYPE_CHECKING:
    from cuvil.frontend.importer import Importer

_EXACT = ("f32", "f64")


def layer_norm(ix: Importer, a: Args) -> Value | tuple:
    shape = tuple(a["normalized_shape"])
    x = ix.tensor(a["input"])
    dtype = ix.type(x).dtype  # a missing weight's ones and bias's zeros: of the input's
    weight = ix.tensor(a["weight"]) if a["weight"] is not None else ix.filled(1.0, shape, dtype)
    bias = ix.tensor(a["bias"]) if a["bias"] is not None else ix.filled(0.0, shape, dtype)
    y = ix.add("layer_norm", [x, weight, bias], {"normalized_shape": shape, "eps": float(a["eps"])})
    if "cudnn_enable" in a:
        return y
    return (y, *statistics(ix, x, len(shape), float(a["eps"])))


def statistics(ix: Importer, x: Value, dims: int,
               eps: float) -> tuple[Value | None, Value | None]:
    """native_layer_norm's mean and reciprocal standard deviation over the last `dims`
    dims, kept as size-1 dims: mean(x) and 1 / sqrt(mean((x - mean(x))^2) + eps) (the
    catalog's `layer_norm_rstd`); (None, None) for a 16-bit x (they run in torch)."""
    if ix.type(x).dtype.name not in _EXACT:
        return None, None
    shape = tuple(ix.type(x).shape[ix.type(x).rank - dims:])
    return _mean(ix, x, dims), ix.add("layer_norm_rstd", [x], {"normalized_shape": shape,
                                                                "eps": eps})


def layer_norm_backward(ix: Importer, a: Args) -> tuple:
    """(dx, dweight, dbias) as the module docstring gives them; None where `output_mask`
    skips one or the norm has no weight or bias."""
    x, dy = ix.tensor(a["input"]), ix.tensor(a["grad_out"])
    need(ix.type(x).dtype.name in _EXACT and ix.type(dy).dtype == ix.type(x).dtype,
         "a 16-bit layer norm's gradient")
    dims, rank = len(a["normalized_shape"]), ix.type(x).rank
    normed = ix.add("mul", [ix.add("sub", [x, ix.tensor(a["mean"])]), ix.tensor(a["rstd"])])
    mask = a["output_mask"]
    dx = dweight = dbias = None
    if mask[0]:
        shape = tuple(a["normalized_shape"])
        weight = ix.tensor(a["weight"]) if a["weight"] is not None else \
            ix.filled(1.0, shape, ix.type(x).dtype)
        dx = ix.add("layer_norm_grad", [dy, x, ix.tensor(a["mean"]), ix.tensor(a["rstd"]),
                                        weight], {"normalized_shape": shape})
    if mask[1] and a["weight"] is not None:
        dweight = _leading_sum(ix, ix.add("mul", [dy, normed]), rank - dims)
    if mask[2] and a["bias"] is not None:
        dbias = _leading_sum(ix, dy, rank - dims)
    return dx, dweight, dbias


def _mean(ix: Importer, x: Value, dims: int) -> Value:
    """The mean over the last `dims` dims, kept as size-1 dims."""
    return ix.add("mean", [x], {"dim": tuple(range(-dims, 0)), "keepdim": True})


def _leading_sum(ix: Importer, x: Value, leading: int) -> Value:
    """The sum over the first `leading` dims (none: x itself)."""
    return ix.add("sum", [x], {"dim": tuple(range(leading)), "keepdim": False}) \
        if leading else x


LAYER_NORM_OPS = {"layer_norm": layer_norm, "native_layer_norm": layer_norm,
                  "native_layer_norm_backward": layer_norm_backward}
