"""Conversion ops, the explicit price of every choice: dtype, layout, device, quantization.

Layout and device are tags: `to_layout` and `to_device` are the logical identity, so the
reference implementation returns its input; lowering gives them their physical meaning.
"""

from __future__ import annotations

import torch

from cuvil.ir.devices import known_devices
from cuvil.ir.types import LAYOUTS, NCHW, NHWC, DType, TensorType
from cuvil.ops.draw import arith
from cuvil.ops.registry import CONVERT, AttrSpec, OpDef, check, register


def _cast_type(ts: list[TensorType], a) -> TensorType:
    return ts[0].with_(dtype=DType(a["dtype"]))


def _layout_type(ts: list[TensorType], a) -> TensorType:
    layout = a["layout"]
    check(layout in LAYOUTS, f"unknown layout {layout!r}")
    if layout in (NCHW, NHWC):
        check(ts[0].rank == 4, f"layout {layout} needs a rank-4 value, not rank {ts[0].rank}")
    return ts[0].with_(layout=layout)


def _device_type(ts: list[TensorType], a) -> TensorType:
    check(a["device"] in known_devices(), f"unknown device {a['device']!r}")
    return ts[0].with_(device=a["device"])


def _quantize_type(ts: list[TensorType], a) -> TensorType:
    check(ts[0].dtype.is_float, f"quantize: input must be float, not {ts[0].dtype}")
    check(a["dtype"] in ("i8", "u8", "i32"), f"quantize: bad dtype {a['dtype']}")
    return ts[0].with_(dtype=DType(a["dtype"]))


def _quantize(x: torch.Tensor, scale: float, zero_point: int, dtype: str) -> torch.Tensor:
    info = torch.iinfo(DType(dtype).torch)
    q = torch.round(x / scale) + zero_point
    return q.clamp(info.min, info.max).to(DType(dtype).torch)


def _dequantize_type(ts: list[TensorType], a) -> TensorType:
    check(not ts[0].dtype.is_float, f"dequantize: input must be integer, not {ts[0].dtype}")
    return ts[0].with_(dtype=DType.f32)


register(OpDef("cast", ("x",), (AttrSpec("dtype", "dtype"),), _cast_type,
               lambda xs, a: xs[0].to(DType(a["dtype"]).torch), CONVERT,
               doc="x converted to dtype", lowering="elementwise", shapes=arith.cast))
register(OpDef("to_layout", ("x",), (AttrSpec("layout", "layout"),), _layout_type,
               lambda xs, a: xs[0], CONVERT, flops=lambda ts, out, a: 0,
               doc="x stored in another physical layout (logical identity)", lowering="move",
               foldable=False, shapes=arith.to_layout))
register(OpDef("to_device", ("x",), (AttrSpec("device", "device"),), _device_type,
               lambda xs, a: xs[0], CONVERT, flops=lambda ts, out, a: 0,
               doc="x moved to another device (logical identity)", lowering="transfer",
               foldable=False, shapes=arith.to_device))
register(OpDef("quantize", ("x",),
               (AttrSpec("scale", "float"), AttrSpec("zero_point", "int", 0),
                AttrSpec("dtype", "dtype", "i8")),
               _quantize_type, lambda xs, a: _quantize(xs[0], **a), CONVERT,
               doc="clamp(round(x / scale) + zero_point) as an integer dtype",
               lowering="elementwise", shapes=arith.quantize))
register(OpDef("dequantize", ("x",), (AttrSpec("scale", "float"), AttrSpec("zero_point", "int", 0)),
               _dequantize_type,
               lambda xs, a: (xs[0].to(torch.float32) - a["zero_point"]) * a["scale"], CONVERT,
               doc="(x - zero_point) * scale as f32", lowering="elementwise", out_dtype="f32",
               shapes=arith.dequantize))
