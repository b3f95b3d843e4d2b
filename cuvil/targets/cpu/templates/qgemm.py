"""The int8 GEMM template: one quantized linear layer (`cuvil.lower.qlayer`: quantize,
`matmul_i8`, dequantize, per-channel weight scale, bias, ReLU) as one call of
`cuvil.targets.cpu.kernels.int8.qgemm_layer`:

    quantize x [M, K] f32 into a u8 scratch xq [M, K4]   true division, K padded to 4
    out [M, N] = ((xq - zx) @ wq) * sx * ws + b, ReLU    u8 x s8 VNNI, int32 sums
    requantized when the layer's output is u8:           rint(out / sy) + zy, clamped

An input already in u8 (the previous layer requantized it) is read in place
(`qgemm_layer_q`; copied to xq only to pad K to 4). Leading dims of x flatten into M. The
int8 weight is packed and, the input's zero point being static, prepared at compile time:
the accumulators' start `-zx * colsum` is a constant of the kernel. That format is the runtime's,
so the template declares these constants (`ctx.derive`, recipe `int8_gemm`) and the
runtime's build step computes them. Shapes, scales, zero points and the ReLU flag reach the
kernel as data, never as literals: every layer of one input rank shares one compiled
kernel, and the runtime's drivers one specialization (a literal tuple would make Numba
compile them anew, ~6 s, for each).
"""

from __future__ import annotations

import numpy as np

from cuvil.ir.types import DType, numel
from cuvil.lower import qlayer
from cuvil.lower.spec import THREADS, KernelSpec, Scratch, Unsupported
from cuvil.targets.cpu.templates.conv import logical
from cuvil.targets.cpu.templates.gemm import _product

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


def channel_vector(array: np.ndarray | None, n: int) -> np.ndarray | None:
    """A per-channel constant ([N], [1, N], [OC, 1, 1], ...) as a flat f32 [n]."""
    if array is None:
        return None
    return np.ascontiguousarray(array, np.float32).reshape(n)


def packed_constants(ctx, layer, recipe: str, k: int, n: int) -> tuple[list[str], int]:
    """Declare the weight packed and prepared for the static input quantization (`recipe`,
    computed by the runtime): (the value names [data, start, scale, bias], K / 4 rounded
    up)."""
    x_zero, weight = layer.product.attrs["x_zero"] + layer.shift, logical(ctx, layer.weight)

    def bind(w: np.ndarray, scale: np.ndarray | None, bias: np.ndarray | None) -> dict:
        return {"weight": weight(w), "scale": channel_vector(scale, n),
                "bias": channel_vector(bias, n), "x_zero": x_zero}

    names = ctx.derive(layer.product.name, recipe, qlayer.packed_types(k, n), bind,
                       layer.weight, layer.scale, layer.bias)
    return names, (k + 3) // 4


def input_qparams(ctx, layer) -> str:
    """[x scale, x zero point, the product's zero point (both as u8), relu, dequantize
    scale, requantize, y scale, y zero point] of the layer, f32: data, not literals, so
    that the kernel's text is the same for every layer (`int8._layer_epilogue`)."""
    q, rq, shift = layer.quantize, layer.requant, layer.shift
    values = [q.attrs["scale"] if q else 1.0, (q.attrs["zero_point"] if q else 0) + shift,
              layer.product.attrs["x_zero"] + shift, float(layer.relu), layer.out_scale,
              float(rq is not None), rq.attrs["scale"] if rq else 1.0,
              rq.attrs["zero_point"] if rq else 0]
    return ctx.prepare(f"{layer.product.name}.qparams", np.array(values, np.float32))


def note(layer) -> str:
    """The kernel's note, the same for every layer of one kind (ReLU, bias and zero points
    are data): the note is part of the kernel module's text, which identical kernels share."""
    return f"{'u8' if layer.quantize is None else 'f32'} in, {NOTE}" + \
        (", requantized to u8" if layer.requant else "")


def generate(group, ctx) -> KernelSpec:
    layer = layer_of(group, ctx, "qgemm")
    x, (k, n) = ctx.type(layer.input), ctx.type(layer.weight).shape
    consts, kb = packed_constants(ctx, layer, "int8_gemm", k, n)
    qp = input_qparams(ctx, layer)
    rows = numel(x.shape[:-1]) if layer.quantize or k % 4 else 1  # u8 rows: read in place
    xq = ctx.add_scratch(f"{layer.product.name}.xq", Scratch(DType.u8, (rows, 4 * kb)))
    last = x.rank - 1
    call = "qgemm_layer" if layer.quantize else "qgemm_layer_q"
    body = [f"mrows = {_product('x0', last)}",
            f"{call}(x0.reshape((mrows, x0.shape[{last}])), x5, x1, x2, x3, x4, xq, "
            f"out.reshape((mrows, out.shape[{last}])), threads)"]
    return KernelSpec("qgemm", ["x0", "x1", "x2", "x3", "x4", "x5", "xq", "threads", "out"],
                      [layer.input, *consts, qp, xq, THREADS, group.output], body,
                      parallel=False, scratch={xq: ctx.scratch[xq]}, note=note(layer))
