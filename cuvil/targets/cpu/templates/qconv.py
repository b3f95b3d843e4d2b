"""The int8 convolution template: one quantized conv2d layer (`cuvil.lower.qlayer`:
quantize, `conv2d_i8`, dequantize, per-channel weight scale, bias, ReLU), NCHW, groups 1,
as one call of `cuvil.targets.cpu.kernels.int8.qconv_layer`:

    quantize x [N, C, H, W] f32 into a u8 scratch xq     true division, as torch's quantize
    per image: HWC transpose, im2col (the zero point as padding), the u8 x s8 GEMM with
    the fused epilogue (sx * ws, bias, ReLU; requantized to u8 when the layer's output
    is), the NCHW write-back

An input already in u8 (the previous layer requantized it) skips the quantize
(`qconv_layer_q`).

The weight is packed at compile time (K over (kh, kw, c)) and prepared for the static input
quantization, as in `qgemm` (recipe `int8_conv`, computed by the runtime's build step); the geometry
is data too, so every int8 convolution shares one compiled kernel. Scratch per thread: the
image in HWC, its im2col rows, the f32 product before the write-back.
"""

from __future__ import annotations

import numpy as np

from cuvil.ir.types import DType
from cuvil.lower.spec import THREADS, KernelSpec, Scratch
from cuvil.ops.nn import pair
from cuvil.targets.cpu.templates.qgemm import input_qparams, layer_of, note, packed_constants


def generate(group, ctx) -> KernelSpec:
    layer = layer_of(group, ctx, "qconv")
    x, out = ctx.type(layer.input), ctx.type(group.output)
    oc, _, kh, kw = ctx.type(layer.weight).shape
    nb, c, h, w = x.shape
    a = layer.product.attrs
    geo = (kh, kw, *pair(a["stride"]), *pair(a["padding"]), *pair(a["dilation"]))
    consts, kb = packed_constants(ctx, layer, "int8_conv", kh * kw * c, oc)
    qp = input_qparams(ctx, layer)
    geometry = ctx.prepare(f"{layer.product.name}.geometry", np.array(geo, np.int64))
    ohw = out.shape[2] * out.shape[3]
    xq = (nb, c, h, w) if layer.quantize else (1, 1, 1, 1)  # a u8 input is read in place
    scratch = {ctx.add_scratch(f"{layer.product.name}.{name}", Scratch(dtype, shape)): name
               for name, dtype, shape in [("xq", DType.u8, xq),
                                          ("xt", DType.u8, ("threads", h, w, c)),
                                          ("cols", DType.u8, ("threads", ohw, 4 * kb)),
                                          ("tmp", out.dtype, ("threads", ohw, oc))]}
    names = ", ".join(scratch.values())
    call = "qconv_layer" if layer.quantize else "qconv_layer_q"
    body = [f"{call}(x0, x5, x6, x1, x2, x3, x4, {names}, out, threads)"]
    return KernelSpec("qconv", [f"x{i}" for i in range(7)] + [*scratch.values(), "threads",
                                                               "out"],
                      [layer.input, *consts, qp, geometry, *scratch, THREADS, group.output],
                      body, parallel=False, scratch={v: ctx.scratch[v] for v in scratch},
                      note=f"NCHW, {note(layer)}")
