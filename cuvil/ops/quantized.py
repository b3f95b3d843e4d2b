"""Integer ops of quantized compilation: int8 weights per output channel, and GEMM and
convolution over 8-bit integers with exact int32 sums.

    qweight(w, axis)        w rounded to int8 per output channel: w / s, s = absmax / 127
    qweight_scale(w, axis)  those scales, shaped to broadcast over the op's output
    matmul_i8(x, w, x_zero) sum_k (x - x_zero) * w, in int32 (x u8 or i8, w i8)
    conv2d_i8(x, w, ...)    the same for a convolution

The quantized forms of `matmul`, `linear` and `conv2d` are `.cvr` ops built from these and
the conversions `quantize`/`dequantize` (`rules/quantize/`), so their meaning is their body.
On constant weights `qweight` and `qweight_scale` fold: the int8 weight and its scales are
computed once, at compile time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cuvil.ir.types import DType, TensorType, numel
from cuvil.ops.draw import arith
from cuvil.ops.draw import nn as draw
from cuvil.ops.linalg import _matmul_flops, _matmul_type
from cuvil.ops.nn import _CONV_ATTRS, _conv_flops, _conv_type
from cuvil.ops.registry import CONV, CONVERT, GEMM, AttrSpec, OpDef, check, register

INT8 = (DType.i8, DType.u8)


def affine_qparams(lo: float, hi: float, qmin: int = 0, qmax: int = 255) -> tuple[float, int]:
    """(scale, zero point) mapping [lo, hi], widened to hold 0 exactly, onto the levels
    qmin..qmax (u8 by default): q = round(x / scale) + zero."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / (qmax - qmin) or 1.0
    return scale, int(qmin - round(lo / scale))


def channel_absmax(w: torch.Tensor, axis: int) -> torch.Tensor:
    """max |w| over every dim but `axis` (one value per output channel)."""
    dims = [d for d in range(w.dim()) if d != axis % w.dim()]
    return w.abs().amax(dim=dims) if dims else w.abs()


def weight_scales(w: torch.Tensor, axis: int) -> torch.Tensor:
    """Symmetric int8 scales per channel (absmax / 127; an all-zero channel gets 1)."""
    absmax = channel_absmax(w.float(), axis)
    return torch.where(absmax > 0, absmax / 127.0, torch.ones_like(absmax))


def _along(v: torch.Tensor, w: torch.Tensor, axis: int) -> torch.Tensor:
    shape = [1] * w.dim()
    shape[axis % w.dim()] = -1
    return v.reshape(shape)


def _qweight(w: torch.Tensor, axis: int) -> torch.Tensor:
    s = _along(weight_scales(w, axis), w, axis)
    return torch.round(w.float() / s).clamp(-127, 127).to(torch.int8)


def _scale_shape(w: TensorType, axis: int) -> tuple:
    """[N] for a matmul weight (axis -1); [OC, 1, 1] for a convolution's (axis 0)."""
    n = w.shape[axis]
    return (n,) if axis % w.rank == w.rank - 1 else (n, *([1] * (w.rank - 2)))


def _qweight_scale(w: torch.Tensor, axis: int) -> torch.Tensor:
    t = TensorType(tuple(w.shape), DType.f32)
    return weight_scales(w, axis).reshape(_scale_shape(t, axis))


def _float_weight(ts: list[TensorType], a) -> TensorType:
    check(ts[0].dtype.is_float, f"weight must be float, not {ts[0].dtype}")
    check(ts[0].rank >= 1, "weight must have rank >= 1")
    return ts[0]


def _int_inputs(x: TensorType, w: TensorType, op: str) -> None:
    check(x.dtype in INT8, f"{op}: x must be u8 or i8, not {x.dtype}")
    check(w.dtype is DType.i8, f"{op}: w must be i8, not {w.dtype}")


def _matmul_i8_type(ts: list[TensorType], a) -> TensorType:
    x, w = ts
    _int_inputs(x, w, "matmul_i8")
    check(w.rank == 2, "matmul_i8: w must be [K, N]")
    return _matmul_type([x.with_(dtype=DType.f32), w.with_(dtype=DType.f32)], a).with_(
        dtype=DType.i32)


def _conv2d_i8_type(ts: list[TensorType], a) -> TensorType:
    x, w = ts
    _int_inputs(x, w, "conv2d_i8")
    out = _conv_type([x.with_(dtype=DType.f32), w.with_(dtype=DType.f32)], a)
    return out.with_(dtype=DType.i32)


def _exact(y: torch.Tensor) -> torch.Tensor:
    """int32 sums computed in f64: exact while |sum| < 2**53 (K * 255 * 127 is far below)."""
    return torch.round(y).to(torch.int32)


def _matmul_i8(xs, a) -> torch.Tensor:
    x, w = xs
    return _exact(torch.matmul(x.double() - a["x_zero"], w.double()))


def _conv2d_i8(xs, a) -> torch.Tensor:
    x, w = xs
    attrs = {k: a[k] for k in ("stride", "padding", "dilation", "groups")}
    # padding reads the zero point: a padded u8 input holds x_zero, which is 0 after shifting
    return _exact(F.conv2d(x.double() - a["x_zero"], w.double(), None, **attrs))


register(OpDef("qweight", ("w",), (AttrSpec("axis", "int", -1),),
               lambda ts, a: _float_weight(ts, a).with_(dtype=DType.i8),
               lambda xs, a: _qweight(xs[0], a["axis"]), CONVERT, lowering="fallback",
               float_only=True, doc="w / s rounded to int8, s = absmax / 127 per index of `axis`"))
register(OpDef("qweight_scale", ("w",), (AttrSpec("axis", "int", -1),),
               lambda ts, a: TensorType(_scale_shape(_float_weight(ts, a), a["axis"]),
                                        DType.f32, "", ts[0].device),
               lambda xs, a: _qweight_scale(xs[0], a["axis"]), CONVERT, lowering="fallback",
               float_only=True,
               flops=lambda ts, out, a: numel(ts[0].shape),
               doc="qweight's scales, shaped to broadcast over the output using w"))
register(OpDef("matmul_i8", ("x", "w"), (AttrSpec("x_zero", "int", 0),), _matmul_i8_type,
               _matmul_i8, GEMM, flops=_matmul_flops, lowering="qgemm",
               doc="sum_k (x - x_zero) * w as int32: u8/i8 x, i8 w [K, N]",
               shapes=arith.matmul_i8))
register(OpDef("conv2d_i8", ("x", "w"), (*_CONV_ATTRS, AttrSpec("x_zero", "int", 0)),
               _conv2d_i8_type, _conv2d_i8, CONV, flops=_conv_flops, lowering="qconv",
               doc="conv2d of (x - x_zero) and w as int32 sums: u8/i8 x, i8 w",
               shapes=draw.conv2d_i8))
