"""The aten -> Cuvil mapping of layer norm in training: `native_layer_norm` with the mean
and reciprocal standard deviation it saves for the backward, and
`native_layer_norm_backward`, each written as the row reductions over the normalized dims
and the elementwise ops it computes, which the optimizer fuses into row kernels.

With x̂ = (x - mean) * rstd and g = dy * w, over the normalized dims R:

    dx = rstd * (g - mean_R(g) - x̂ * mean_R(g * x̂))
    dw = sum over the other dims of dy * x̂,   db = sum over the other dims of dy
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cuvil.frontend.converter import Args, Value, need
from cuvil.ir.types import DType

if TYPE_CHECKING:
    from cuvil.frontend.importer import Importer


def _dims(ix: Importer, x: Value, normalized: tuple) -> tuple[tuple, tuple]:
    """(the normalized dims, the others) of `x`."""
    rank = ix.type(x).rank
    return tuple(range(rank - len(normalized), rank)), tuple(range(rank - len(normalized)))


def _mean(ix: Importer, x: Value, dims: tuple) -> Value:
    return ix.add("mean", [x], {"dim": dims, "keepdim": True})


def row_statistics(ix: Importer, x: Value, normalized: tuple, eps: float) -> tuple:
    """(mean, rstd) of `x` over its normalized dims, kept as dims of size 1."""
    rows, _ = _dims(ix, x, normalized)
    mean = _mean(ix, x, rows)
    centered = ix.add("sub", [x, mean])
    variance = _mean(ix, ix.add("mul", [centered, centered]), rows)
    return mean, ix.add("rsqrt", [ix.add("add", [variance, ix.tensor(float(eps))])])


def native_layer_norm(ix: Importer, a: Args) -> tuple:
    """(y, mean, rstd): y is the `layer_norm` op, the statistics row reductions of x."""
    from cuvil.frontend.aten import layer_norm

    y, _, _ = layer_norm(ix, a)
    x = ix.tensor(a["input"])
    if ix.type(x).dtype != DType.f32:  # torch keeps other dtypes' statistics in f32
        return y, None, None
    return (y, *row_statistics(ix, x, tuple(a["normalized_shape"]), a["eps"]))


def native_layer_norm_backward(ix: Importer, a: Args) -> tuple:
    """(dx, dw, db), each None where `output_mask` leaves it out."""
    dy, x = ix.tensor(a["grad_out"]), ix.tensor(a["input"])
    need(ix.type(x).dtype == DType.f32 and ix.type(dy).dtype == DType.f32,
         "layer norm backward of a dtype other than f32")
    rows, others = _dims(ix, x, tuple(a["normalized_shape"]))
    normed = ix.add("mul", [ix.add("sub", [x, ix.tensor(a["mean"])]), ix.tensor(a["rstd"])])
    dx = dw = db = None
    want_dx, want_dw, want_db = a["output_mask"]
    if want_dx:
        g = dy if a["weight"] is None else ix.add("mul", [dy, ix.tensor(a["weight"])])
        g_normed = _mean(ix, ix.add("mul", [g, normed]), rows)
        centered = ix.add("sub", [g, _mean(ix, g, rows)])
        inner = ix.add("sub", [centered, ix.add("mul", [normed, g_normed])])
        dx = ix.add("mul", [ix.tensor(a["rstd"]), inner])
    if want_dw and a["weight"] is not None:
        dw = _column_sum(ix, ix.add("mul", [dy, normed]), others)
    if want_db and a["bias"] is not None:
        db = _column_sum(ix, dy, others)
    return dx, dw, db


def _column_sum(ix: Importer, x: Value, dims: tuple) -> Value:
    return ix.add("sum", [x], {"dim": dims, "keepdim": False}) if dims else x


LAYER_NORM_OPS = {"native_layer_norm": native_layer_norm,
                  "native_layer_norm_backward": native_layer_norm_backward}
