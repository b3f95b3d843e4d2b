"""Neural-network ops: convolution, normalisation, softmax, pooling, embedding, attention.

Spatial ops take logical NCHW shapes whatever the layout tag, and keep their input's layout.
"""

from __future__ import annotations

import sympy
import torch
import torch.nn.functional as F

from cuvil.ir.types import Dim, DType, TensorType, default_layout, is_static, numel
from cuvil.ops.draw import arith
from cuvil.ops.draw import nn as draw
from cuvil.ops.registry import (
    CONV,
    GEMM,
    MISC,
    NORM,
    POOL,
    AttrSpec,
    OpDef,
    check,
    pair,
    register,
)


def floordiv(a: Dim, b: int) -> Dim:
    if is_static(a):
        return a // b
    return sympy.floor(a / b)


def ceildiv(a: Dim, b: int) -> Dim:
    if is_static(a):
        return -(-a // b)
    return sympy.ceiling(a / b)


def window_out(size: Dim, k: int, s: int, p: int, d: int = 1, ceil: bool = False) -> Dim:
    """Output length of a sliding window (torch's formula, ceil_mode included)."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (ceildiv(span, s) if ceil else floordiv(span, s)) + 1
    if ceil and is_static(out) and (out - 1) * s >= size + p:
        out -= 1
    return out


def _conv_type(ts: list[TensorType], a) -> TensorType:
    x, w = ts
    check(x.rank == 4 and w.rank == 4, "conv2d: input and weight must have rank 4")
    check(x.dtype == w.dtype, f"conv2d: dtypes differ ({x.dtype}, {w.dtype})")
    (sh, sw), (ph, pw), (dh, dw) = (pair(a["stride"]), pair(a["padding"]),
                                    pair(a["dilation"]))
    g = a["groups"]
    check(x.shape[1] == w.shape[1] * g, f"conv2d: {x.shape[1]} input channels do not match "
          f"weight {w.shape[1]} x groups {g}")
    check(is_static(w.shape[0]) and w.shape[0] % g == 0, "conv2d: out channels % groups != 0")
    h = window_out(x.shape[2], w.shape[2], sh, ph, dh)
    wd = window_out(x.shape[3], w.shape[3], sw, pw, dw)
    check(not is_static(h) or (h > 0 and wd > 0), "conv2d: output would be empty")
    return TensorType((x.shape[0], w.shape[0], h, wd), x.dtype, x.layout, x.device)


def _conv_flops(ts, out, a):
    w = ts[1].shape
    return 2 * numel(out.shape) * w[1] * w[2] * w[3]


_CONV_ATTRS = (AttrSpec("stride", "ints", (1, 1)), AttrSpec("padding", "ints", (0, 0)),
               AttrSpec("dilation", "ints", (1, 1)), AttrSpec("groups", "int", 1))
register(OpDef("conv2d", ("x", "w"), _CONV_ATTRS, _conv_type,
               lambda xs, a: F.conv2d(xs[0], xs[1], None, **a), CONV, flops=_conv_flops,
               doc="2-d cross-correlation, no bias (NCHW logical shapes)", shapes=draw.conv2d))


def _channel_param_type(ts: list[TensorType], a, what: str) -> TensorType:
    x = ts[0]
    check(x.rank >= 2, f"{what}: input must have rank >= 2")
    for p in ts[1:]:
        check(p.shape == (x.shape[1],), f"{what}: parameters must have shape [{x.shape[1]}]")
    return x


register(OpDef("batch_norm", ("x", "weight", "bias", "mean", "var"),
               (AttrSpec("eps", "float", 1e-5),),
               lambda ts, a: _channel_param_type(ts, a, "batch_norm"),
               lambda xs, a: F.batch_norm(xs[0], xs[3], xs[4], xs[1], xs[2], False, 0.0,
                                          a["eps"]),
               NORM, flops=lambda ts, out, a: 2 * numel(out.shape), lowering="elementwise",
               doc="(x - mean) / sqrt(var + eps) * weight + bias over dim 1 (inference)",
               shapes=arith.batch_norm))


def _batch_norm_weight_grad_type(ts: list[TensorType], a) -> TensorType:
    dy, x = ts[:2]
    check(dy.shape == x.shape and dy.dtype == x.dtype and x.dtype.is_float and x.rank >= 2,
          "batch_norm_weight_grad: dy and x must be float tensors of one shape, rank >= 2")
    _channel_param_type(ts[1:], a, "batch_norm_weight_grad")
    check(all(t.dtype == x.dtype for t in ts[2:]),
          f"batch_norm_weight_grad: mean and invstd must be {x.dtype}")
    return TensorType((x.shape[1],), x.dtype, "", x.device)


def _batch_norm_weight_grad(xs: list[torch.Tensor], a) -> torch.Tensor:
    dy, x, mean, invstd = xs
    dims = [d for d in range(x.dim()) if d != 1]
    per_channel = (-1,) + (1,) * (x.dim() - 2)
    return (dy * (x - mean.reshape(per_channel))).sum(dims) * invstd


register(OpDef("batch_norm_weight_grad", ("dy", "x", "mean", "invstd"), (),
               _batch_norm_weight_grad_type, _batch_norm_weight_grad, NORM,
               flops=lambda ts, out, a: 3 * numel(ts[0].shape),
               doc="a training batch norm's weight gradient from the batch mean and 1/std it "
                   "saved: sum(dy * (x - mean) * invstd) over every dim but the channels (1)",
               shapes=arith.batch_norm_weight_grad))


def _layer_norm_type(ts: list[TensorType], a) -> TensorType:
    x = ts[0]
    ns = tuple(a["normalized_shape"])
    check(x.shape[x.rank - len(ns):] == ns, f"layer_norm: trailing dims must be {list(ns)}")
    for p in ts[1:]:
        check(p.shape == ns, f"layer_norm: parameters must have shape {list(ns)}")
    return x


register(OpDef("layer_norm", ("x", "weight", "bias"),
               (AttrSpec("normalized_shape", "shape"), AttrSpec("eps", "float", 1e-5)),
               _layer_norm_type,
               lambda xs, a: F.layer_norm(xs[0], a["normalized_shape"], xs[1], xs[2], a["eps"]),
               NORM, flops=lambda ts, out, a: 8 * numel(out.shape),
               doc="normalise over the trailing normalized_shape dims, then scale and shift",
               shapes=arith.layer_norm))


def _layer_norm_rstd_type(ts: list[TensorType], a) -> TensorType:
    x, ns = ts[0], tuple(a["normalized_shape"])
    k = len(ns)
    check(x.dtype.is_float, "layer_norm_rstd: input must be float")
    check(k >= 1 and x.shape[x.rank - k:] == ns,
          f"layer_norm_rstd: trailing dims must be {list(ns)}")
    return TensorType((*x.shape[:x.rank - k], *(1,) * k), x.dtype, "", x.device)


register(OpDef("layer_norm_rstd", ("x",),
               (AttrSpec("normalized_shape", "shape"), AttrSpec("eps", "float", 1e-5)),
               _layer_norm_rstd_type,
               lambda xs, a: torch.ops.aten.native_layer_norm(
                   xs[0], list(a["normalized_shape"]), None, None, a["eps"])[2],
               NORM, flops=lambda ts, out, a: 4 * numel(ts[0].shape),
               doc="1 / sqrt(var + eps) over the trailing normalized_shape dims (the "
                   "population variance), kept as size-1 dims: the rstd a layer norm saves",
               shapes=arith.layer_norm_rstd))


def _layer_norm_grad_type(ts: list[TensorType], a) -> TensorType:
    dy, x, mean, rstd, w = ts
    ns = tuple(a["normalized_shape"])
    k = len(ns)
    check(dy.shape == x.shape and dy.dtype == x.dtype and x.dtype.is_float,
          "layer_norm_grad: dy and x must be float tensors of one shape and dtype")
    check(k >= 1 and x.shape[x.rank - k:] == ns,
          f"layer_norm_grad: trailing dims must be {list(ns)}")
    stats = (*x.shape[:x.rank - k], *(1,) * k)
    for t, what in ((mean, "mean"), (rstd, "rstd")):
        check(t.shape == stats and t.dtype == x.dtype,
              f"layer_norm_grad: {what} must be {x.dtype}{list(stats)}")
    check(w.shape == ns and w.dtype == x.dtype,
          f"layer_norm_grad: weight must be {x.dtype}{list(ns)}")
    return TensorType(dy.shape, dy.dtype, "", dy.device)


def _layer_norm_grad(xs: list[torch.Tensor], a) -> torch.Tensor:
    dy, x, mean, rstd, w = xs
    return torch.ops.aten.native_layer_norm_backward(dy, x, list(a["normalized_shape"]), mean,
                                                     rstd, w, None, [True, False, False])[0]


register(OpDef("layer_norm_grad", ("dy", "x", "mean", "rstd", "weight"),
               (AttrSpec("normalized_shape", "shape"),), _layer_norm_grad_type,
               _layer_norm_grad, NORM, flops=lambda ts, out, a: 10 * numel(out.shape),
               doc="a layer norm's input gradient from its saved mean and 1/std: with "
                   "x^ = (x - mean) * rstd and g = dy * weight over the normalized dims, "
                   "rstd * (g - mean(g) - x^ * mean(g * x^))",
               shapes=arith.layer_norm_grad))


def _softmax_type(ts: list[TensorType], a) -> TensorType:
    check(-ts[0].rank <= a["dim"] < max(ts[0].rank, 1), f"softmax: dim {a['dim']} out of range")
    check(ts[0].dtype.is_float, "softmax: input must be float")
    return ts[0]


for _name, _fn in [("softmax", torch.softmax), ("log_softmax", torch.log_softmax)]:
    register(OpDef(_name, ("x",), (AttrSpec("dim", "int", -1),), _softmax_type,
                   lambda xs, a, fn=_fn: fn(xs[0], a["dim"]), NORM,
                   flops=lambda ts, out, a: 5 * numel(out.shape),
                   doc=f"{_name} along dim", shapes=arith.softmax))


def _pool_type(ts: list[TensorType], a) -> TensorType:
    x = ts[0]
    check(x.rank == 4, "pool: input must have rank 4")
    k, p = pair(a["kernel_size"]), pair(a["padding"])
    s = pair(a["stride"]) if a["stride"] else k
    d = pair(a.get("dilation", 1))
    hw = [window_out(x.shape[2 + i], k[i], s[i], p[i], d[i], a["ceil_mode"]) for i in (0, 1)]
    return x.with_(shape=(x.shape[0], x.shape[1], *hw), layout=x.layout)


def _pool_args(a) -> dict:
    """torch's pooling keywords; an empty stride means the kernel size."""
    return {**a, "stride": a["stride"] or None}


register(OpDef("max_pool2d", ("x",),
               (AttrSpec("kernel_size", "ints"), AttrSpec("stride", "ints", ()),
                AttrSpec("padding", "ints", (0, 0)), AttrSpec("dilation", "ints", (1, 1)),
                AttrSpec("ceil_mode", "bool", False)),
               _pool_type, lambda xs, a: F.max_pool2d(xs[0], **_pool_args(a)), POOL,
               doc="max over sliding windows", shapes=draw.pool))
MAX_POOL_ATTRS = (AttrSpec("kernel_size", "ints"), AttrSpec("stride", "ints", ()),
                AttrSpec("padding", "ints", (0, 0)), AttrSpec("dilation", "ints", (1, 1)),
                AttrSpec("ceil_mode", "bool", False))


def _max_pool_indices_type(ts: list[TensorType], a) -> TensorType:
    check(ts[0].dtype.is_float, "max_pool2d_indices: input must be float")
    return _pool_type(ts, a).with_(dtype=DType.i64)


def _pool_window_args(a) -> list:
    """torch's positional pooling arguments: kernel, stride, padding, dilation, ceil_mode."""
    return [list(pair(a["kernel_size"])), list(pair(a["stride"] or a["kernel_size"])),
            list(pair(a["padding"])), list(pair(a["dilation"])), a["ceil_mode"]]


register(OpDef("max_pool2d_indices", ("x",), MAX_POOL_ATTRS, _max_pool_indices_type,
               lambda xs, a: torch.ops.aten.max_pool2d_with_indices(
                   xs[0], *_pool_window_args(a))[1], POOL, flops=lambda ts, out, a: 0,
               doc="where max_pool2d's maximum of each window is: its flat position "
                   "(row * width + column) in the input's plane, the first of equal ones "
                   "(a NaN's, the last NaN's), as torch's max_pool2d_with_indices",
               shapes=draw.pool))


def _max_pool_backward_type(ts: list[TensorType], a) -> TensorType:
    grad, x, idx = ts
    pooled = _pool_type([x], a)
    check(grad.shape == pooled.shape and idx.shape == pooled.shape,
          "max_pool2d_backward: grad and indices must have max_pool2d's output shape")
    check(idx.dtype is DType.i64 and grad.dtype == x.dtype and x.dtype.is_float,
          "max_pool2d_backward: float grad and input, i64 indices")
    return x


register(OpDef("max_pool2d_backward", ("grad", "x", "indices"), MAX_POOL_ATTRS,
               _max_pool_backward_type,
               lambda xs, a: torch.ops.aten.max_pool2d_with_indices_backward(
                   xs[0], xs[1], *_pool_window_args(a), xs[2]), POOL,
               flops=lambda ts, out, a: numel(ts[0].shape),
               doc="max_pool2d's input gradient: each grad added at its indices' position "
                   "in its plane of a zero tensor shaped as x (x gives only the shape)",
               shapes=draw.pool_backward))
def _avg_pool_type(ts: list[TensorType], a) -> TensorType:
    check(ts[0].dtype.is_float, "input must be float")  # torch averages floats only
    return _pool_type(ts, a)


register(OpDef("avg_pool2d", ("x",),
               (AttrSpec("kernel_size", "ints"), AttrSpec("stride", "ints", ()),
                AttrSpec("padding", "ints", (0, 0)), AttrSpec("ceil_mode", "bool", False),
                AttrSpec("count_include_pad", "bool", True)),
               _avg_pool_type, lambda xs, a: F.avg_pool2d(xs[0], **_pool_args(a)), POOL,
               doc="mean over sliding windows", shapes=draw.pool))


def _adaptive_type(ts: list[TensorType], a) -> TensorType:
    x = ts[0]
    check(x.rank == 4, "adaptive_avg_pool2d: input must have rank 4")
    check(x.dtype.is_float, "input must be float")
    oh, ow = pair(a["output_size"])
    return x.with_(shape=(x.shape[0], x.shape[1], oh, ow), layout=x.layout)


register(OpDef("adaptive_avg_pool2d", ("x",), (AttrSpec("output_size", "ints"),), _adaptive_type,
               lambda xs, a: F.adaptive_avg_pool2d(xs[0], a["output_size"]), POOL,
               flops=lambda ts, out, a: numel(ts[0].shape),
               doc="mean over output_size adaptive windows", shapes=draw.adaptive_pool))


def _embedding_type(ts: list[TensorType], a) -> TensorType:
    w, idx = ts
    check(w.rank == 2, "embedding: weight must have rank 2")
    check(idx.dtype in (DType.i32, DType.i64), "embedding: indices must be integers")
    shape = (*idx.shape, w.shape[1])
    return TensorType(shape, w.dtype, default_layout(len(shape)), w.device)


register(OpDef("embedding", ("weight", "indices"), (), _embedding_type,
               lambda xs, a: F.embedding(xs[1], xs[0]), MISC, lowering="gather",
               flops=lambda ts, out, a: 0, doc="rows of weight picked by indices",
               shapes=draw.embedding))


def _sdpa_type(ts: list[TensorType], a) -> TensorType:
    q, k, v = ts[:3]
    check(q.rank >= 2 and k.rank == q.rank and v.rank == q.rank, "attention: ranks differ")
    check(q.shape[-1] == k.shape[-1], "attention: q and k head dims differ")
    check(k.shape[-2] == v.shape[-2], "attention: k and v lengths differ")
    check(q.dtype.is_float, "attention: inputs must be float")
    if len(ts) == 4:
        from cuvil.ops.elementwise import broadcast_shapes

        check(ts[3].rank >= 2, "attention: the mask needs rank >= 2")
        broadcast_shapes(ts[3].shape, (*q.shape[:-1], k.shape[-2]))
    return TensorType((*q.shape[:-1], v.shape[-1]), q.dtype, "", q.device)


def _sdpa(xs, a):
    mask = xs[3] if len(xs) == 4 else None
    return F.scaled_dot_product_attention(xs[0], xs[1], xs[2], attn_mask=mask,
                                          is_causal=a["is_causal"], scale=a["scale"])


register(OpDef("scaled_dot_product_attention", ("q", "k", "v", "mask?"),
               (AttrSpec("is_causal", "bool", False), AttrSpec("scale", "optfloat", None)),
               _sdpa_type, _sdpa, GEMM, lowering="attention",
               flops=lambda ts, out, a: 4 * numel(out.shape[:-1]) * ts[1].shape[-2]
               * ts[0].shape[-1],
               doc="softmax(q @ k^T * scale + mask) @ v", shapes=draw.attention))
