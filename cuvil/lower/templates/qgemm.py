"""The int8 GEMM template: one quantized linear layer (`cuvil.lower.qlayer`: quantize,
`matmul_i8`, dequantize, per-channel weight scale, bias, ReLU) as one call of
`cuvil.runtime.int8.qgemm_layer`:

    quantize x [M, K] f32 into a u8 scratch xq [M, K4]   true division, K padded to 4
    out [M, N] = (xq - zx) @ wq * (sx * ws) + b, ReLU    u8 x s8 VNNI, int32 sums

Leading dims of x flatten into M. At compile time the int8 weight is packed
(`cuvil.runtime.quantized.pack_weight`) and, the input's scale and zero point being static,
`int8.prepare`d: the accumulators' start `-zx * colsum` and the column scales `sx * ws`
are constants of the kernel. Shapes, scales, zero points and the ReLU flag reach the
kernel as data, never as literals: every layer of one input rank shares one compiled
kernel, and the runtime's drivers one specialization (a literal tuple would make Numba
compile them anew, ~6 s, for each).
"""

from __future__ import annotations

import numpy as np

from cuvil.errors import CuvilError
from cuvil.ir.types import DType, numel
from cuvil.lower import qlayer
from cuvil.lower.templates.conv import logical_const
from cuvil.lower.templates.gemm import _product
from cuvil.lower.templates.helpers import preparer
from cuvil.lower.templates.spec import THREADS, KernelSpec, Scratch, Unsupported

# The kernel's note, the same for every layer (ReLU, bias and zero points are data): the
# note is part of the kernel module's text, which identical kernels share.
NOTE = "u8 x s8, fused dequantize, bias, relu"


def layer_of(group, ctx, template: str) -> qlayer.Int8Layer:
    """The group's int8 layer, or Unsupported when the group is not exactly one."""
    names = [n.name for n in group.node_list(ctx)]
    layer = qlayer.match(ctx.graph, names, ctx.users, set(ctx.graph.outputs))
    if layer is None or layer.template != template:
        op = next((ctx.graph[n].op for n in names if ctx.graph[n].op in qlayer.PRODUCTS),
                  "an int8 product")
        raise Unsupported(f"{op} outside an int8 layer (quantize, {op}, dequantize, weight "
                          "scale, bias, relu)")
    return layer


def channel_vector(ctx, value: str | None, n: int) -> np.ndarray | None:
    """A per-channel constant ([N], [1, N], [OC, 1, 1], ...) as a flat f32 [n]."""
    if value is None:
        return None
    return np.ascontiguousarray(ctx.const_array(value), np.float32).reshape(n)


def packed_constants(ctx, layer, pack: str, n: int) -> tuple[list[str], int]:
    """Pack the weight, prepare it for the static input quantization and register the
    arrays: (their value names [data, start, scale, bias], K / 4 rounded up)."""
    weight = logical_const(ctx, layer.weight)
    try:
        packed = preparer(pack)(weight, channel_vector(ctx, layer.scale, n))
    except CuvilError as e:
        raise Unsupported(str(e)) from e
    zx = layer.product.attrs["x_zero"] + layer.shift
    args = packed.args(channel_vector(ctx, layer.bias, n))
    data, start, scale, bias, kb, _ = preparer("prepare")(args, zx, layer.out_scale)
    key = layer.product.name
    names = [ctx.prepare(f"{key}.{part}", array) for part, array in
             (("qdata", data), ("qstart", start), ("qscale", scale), ("qbias", bias))]
    return names, kb


def input_qparams(ctx, layer) -> str:
    """[scale, zero point, the product's zero point (both as u8), relu] of the layer, f32:
    data, not literals, so that the kernel's text is the same for every layer."""
    q, shift = layer.quantize.attrs, layer.shift
    values = [q["scale"], q["zero_point"] + shift, layer.product.attrs["x_zero"] + shift,
              float(layer.relu)]
    return ctx.prepare(f"{layer.quantize.name}.qparams", np.array(values, np.float32))


def generate(group, ctx) -> KernelSpec:
    layer = layer_of(group, ctx, "qgemm")
    x, n = ctx.type(layer.input), ctx.type(layer.weight).shape[1]
    consts, kb = packed_constants(ctx, layer, "pack_weight", n)
    qp = input_qparams(ctx, layer)
    rows = numel(x.shape[:-1])
    xq = ctx.add_scratch(f"{layer.product.name}.xq", Scratch(DType.u8, (rows, 4 * kb)))
    last = x.rank - 1
    body = [f"mrows = {_product('x0', last)}",
            f"qgemm_layer(x0.reshape((mrows, x0.shape[{last}])), x5, x1, x2, x3, x4, xq, "
            f"out.reshape((mrows, out.shape[{last}])), threads)"]
    return KernelSpec("qgemm", ["x0", "x1", "x2", "x3", "x4", "x5", "xq", "threads", "out"],
                      [layer.input, *consts, qp, xq, THREADS, group.output], body,
                      parallel=False, scratch={xq: ctx.scratch[xq]}, note=NOTE)
