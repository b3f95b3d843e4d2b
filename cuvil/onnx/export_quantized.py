"""The Cuvil -> ONNX mapping of quantized compilation's integer ops (`ops/convert.py`,
`ops/quantized.py`), for the exporter, as ONNX Runtime computes them in integers:

    quantize(x, s, z, u8|i8)   QuantizeLinear(x, s, z)      (f32 x; round half to even)
    dequantize(x, s, z)        DequantizeLinear(x, s, z)    (u8/i8 x, or i32 with z = 0)
    matmul_i8(x, w, x_zero)    MatMulInteger(x, w, x_zero)  (int32 sums)
    conv2d_i8(x, w, ...)       ConvInteger(x, w, x_zero)    (the padding holds x_zero)

A quantize or dequantize that those ops do not cover (an i32 result, another float dtype,
an i32 input with a zero point) is written as its definition in float ops: Div, Round,
Add, Clip and Cast; Cast, Sub and Mul. `qweight` and `qweight_scale` fold on the constant
weights the int8 rules need, so an exported graph holds their int8 weights and scales.
"""

from __future__ import annotations

import torch

from cuvil.ir.graph import Node
from cuvil.ir.types import DType
from cuvil.onnx.export import ELEM, Writer

LINEAR = (DType.u8, DType.i8)  # what QuantizeLinear writes and DequantizeLinear reads


def quantize(w: Writer, node: Node) -> None:
    a = node.attrs
    x = node.inputs[0]
    dtype = DType(a["dtype"])
    scale = w.constant(a["scale"], DType.f32)
    if dtype in LINEAR and w.dtype(x) == DType.f32:
        w.add("QuantizeLinear", [w.arg(x), scale, w.constant(a["zero_point"], dtype)],
              out=node.name)
        return
    xtype = w.dtype(x)
    info = torch.iinfo(dtype.torch)
    ratio = w.add("Div", [w.arg(x), w.constant(a["scale"], xtype)])
    levels = w.add("Add", [w.add("Round", [ratio]), w.constant(a["zero_point"], xtype)])
    clipped = w.add("Clip", [levels, w.constant(info.min, xtype), w.constant(info.max, xtype)])
    w.add("Cast", [clipped], out=node.name, to=ELEM[dtype])


def dequantize(w: Writer, node: Node) -> None:
    a = node.attrs
    x = node.inputs[0]
    dtype = w.dtype(x)
    scale = w.constant(a["scale"], DType.f32)
    if dtype in LINEAR or (dtype == DType.i32 and a["zero_point"] == 0):
        w.add("DequantizeLinear", [w.arg(x), scale, w.constant(a["zero_point"], dtype)],
              out=node.name)
        return
    shifted = w.add("Sub", [w.add("Cast", [w.arg(x)], to=ELEM[DType.f32]),
                            w.constant(a["zero_point"], DType.f32)])
    w.add("Mul", [shifted, scale], out=node.name)


def matmul_i8(w: Writer, node: Node) -> None:
    x, weight = node.inputs
    zero = w.constant(node.attrs["x_zero"], w.dtype(x))
    w.add("MatMulInteger", [w.arg(x), w.arg(weight), zero], out=node.name)


def conv2d_i8(w: Writer, node: Node) -> None:
    a = node.attrs
    x, weight = node.inputs
    zero = w.constant(a["x_zero"], w.dtype(x))
    w.add("ConvInteger", [w.arg(x), w.arg(weight), zero], out=node.name,
          strides=list(a["stride"]), pads=list(a["padding"]) * 2,
          dilations=list(a["dilation"]), group=a["groups"])


QUANTIZED_EMITTERS = {"quantize": quantize, "dequantize": dequantize, "matmul_i8": matmul_i8,
                      "conv2d_i8": conv2d_i8}
