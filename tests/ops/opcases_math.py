"""Op cases for elementwise ops, reductions and conversions: valid random inputs, and the
torch expression each op stands for."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import strategies as st
from opcases_support import (
    FLOATS,
    INTS,
    NUMERIC,
    Case,
    batch_shape,
    broadcast_tensors,
    dims_of,
    rand,
)

from cuvil.ir.types import DType

ALL = NUMERIC + [torch.bool]


def _binary(dtypes_x, dtypes_y=None):
    return lambda data: (broadcast_tensors(data, [dtypes_x, dtypes_y or dtypes_x]), {})


def _unary(dtypes, **attrs):
    def draw(data):
        drawn = {k: data.draw(v) for k, v in attrs.items()}
        return [rand(data, batch_shape(data, 0, 4), data.draw(st.sampled_from(dtypes)))], drawn

    return draw


def _exponents(data):
    x, y = broadcast_tensors(data, [FLOATS, FLOATS + INTS])
    return [x, y.abs() if not y.is_floating_point() else y], {}


def _where(data):
    return broadcast_tensors(data, [[torch.bool], NUMERIC, NUMERIC]), {}


def _masked_fill(data):
    x, mask = broadcast_tensors(data, [NUMERIC, [torch.bool]])
    big = torch.broadcast_shapes(x.shape, mask.shape)
    x = x.expand(big).contiguous()
    value = data.draw(st.floats(-3, 3) if x.is_floating_point() else st.integers(-3, 3))
    return [x, mask], {"value": value}


def _bounds(data):
    x = rand(data, batch_shape(data, 0, 4), data.draw(st.sampled_from(NUMERIC)))
    number = st.one_of(st.none(), st.integers(-2, 2), st.floats(-2, 2))
    return [x], {"min": data.draw(number), "max": data.draw(number)}


def _reduce(dtypes):
    def draw(data):
        x = rand(data, batch_shape(data, 0, 4), data.draw(st.sampled_from(dtypes)))
        return [x], {"dim": dims_of(data, x.dim()), "keepdim": data.draw(st.booleans())}

    return draw


def _var(data):
    """A float reduction's draw with a correction of 0 or 1 (0 where one value is reduced)."""
    (x,), attrs = _reduce(FLOATS)(data)
    dims = attrs["dim"] or tuple(range(x.dim()))
    count = int(torch.tensor([x.shape[d] for d in dims]).prod()) if x.dim() else 1
    return [x], {**attrs, "correction": data.draw(st.integers(0, 1)) if count > 1 else 0}


def _reduced(fn):
    return lambda xs, a: fn(xs[0], dim=a["dim"] or None, keepdim=a["keepdim"])


def _cast(data):
    x = rand(data, batch_shape(data, 0, 4), data.draw(st.sampled_from(ALL)))
    return [x], {"dtype": data.draw(st.sampled_from(["f32", "f64", "f16", "i32", "i64", "i8",
                                                      "u8", "bool"]))}


def _layout(data):
    shape = batch_shape(data, 0, 4)
    layouts = ["contiguous", "NCHW", "NHWC"] if len(shape) == 4 else ["contiguous"]
    return [rand(data, shape)], {"layout": data.draw(st.sampled_from(layouts))}


def _quantize(data):
    x = rand(data, batch_shape(data, 0, 4))  # torch quantizes f32 only
    dtype = data.draw(st.sampled_from(["i8", "u8", "i32"]))
    return [x], {"scale": data.draw(st.sampled_from([0.01, 0.05, 0.1, 0.5])),
                 "zero_point": data.draw(st.integers(0 if dtype == "u8" else -3, 3)),
                 "dtype": dtype}


def _numpy_quantize(xs, a):
    """The definition, in numpy: round half to even, shift, saturate."""
    dtype = DType(a["dtype"]).numpy
    info = np.iinfo(dtype)
    q = np.rint(xs[0].numpy() / np.float32(a["scale"])) + a["zero_point"]
    return torch.from_numpy(np.asarray(np.clip(q, info.min, info.max).astype(dtype)))


def _dequantize(data):
    dtype = data.draw(st.sampled_from(["i8", "u8", "i32"]))
    x = rand(data, batch_shape(data, 0, 4), DType(dtype).torch)
    return [x], {"scale": data.draw(st.sampled_from([0.01, 0.5])),
                 "zero_point": data.draw(st.integers(0, 3))}


def _numpy_dequantize(xs, a):
    x = xs[0].numpy().astype(np.float32)
    return torch.from_numpy(np.asarray((x - np.float32(a["zero_point"])) * np.float32(a["scale"])))


CASES: dict[str, Case] = {
    "add": Case(_binary(ALL), lambda xs, a: torch.add(*xs)),
    "sub": Case(_binary(NUMERIC), lambda xs, a: torch.sub(*xs)),
    "mul": Case(_binary(ALL), lambda xs, a: torch.mul(*xs)),
    "div": Case(_binary(NUMERIC), lambda xs, a: xs[0] / xs[1]),
    "pow": Case(_exponents, lambda xs, a: xs[0] ** xs[1]),
    "maximum": Case(_binary(NUMERIC), lambda xs, a: torch.maximum(*xs)),
    "minimum": Case(_binary(NUMERIC), lambda xs, a: torch.minimum(*xs)),
    "eq": Case(_binary(ALL), lambda xs, a: xs[0] == xs[1]),
    "ne": Case(_binary(ALL), lambda xs, a: xs[0] != xs[1]),
    "lt": Case(_binary(NUMERIC), lambda xs, a: xs[0] < xs[1]),
    "le": Case(_binary(NUMERIC), lambda xs, a: xs[0] <= xs[1]),
    "gt": Case(_binary(NUMERIC), lambda xs, a: xs[0] > xs[1]),
    "ge": Case(_binary(NUMERIC), lambda xs, a: xs[0] >= xs[1]),
    "logical_and": Case(_binary(ALL), lambda xs, a: torch.logical_and(*xs)),
    "logical_or": Case(_binary(ALL), lambda xs, a: torch.logical_or(*xs)),
    "neg": Case(_unary(NUMERIC), lambda xs, a: -xs[0]),
    "sqrt": Case(_unary(NUMERIC), lambda xs, a: torch.sqrt(xs[0])),
    "rsqrt": Case(_unary(NUMERIC), lambda xs, a: 1 / torch.sqrt(xs[0].double()).to(
        torch.promote_types(xs[0].dtype, torch.float32)), tol=1e-5),
    "exp": Case(_unary(NUMERIC), lambda xs, a: torch.exp(xs[0])),
    "log": Case(_unary(NUMERIC), lambda xs, a: torch.log(xs[0])),
    "tanh": Case(_unary(NUMERIC), lambda xs, a: torch.tanh(xs[0])),
    "erf": Case(_unary(NUMERIC), lambda xs, a: torch.special.erf(xs[0])),
    "sin": Case(_unary(NUMERIC), lambda xs, a: torch.sin(xs[0])),
    "cos": Case(_unary(NUMERIC), lambda xs, a: torch.cos(xs[0])),
    "sigmoid": Case(_unary(NUMERIC), lambda xs, a: 1 / (1 + torch.exp(-xs[0].double())).to(
        torch.promote_types(xs[0].dtype, torch.float32)), tol=1e-5),
    "silu": Case(_unary(FLOATS), lambda xs, a: F.silu(xs[0])),
    "reciprocal": Case(_unary(NUMERIC), lambda xs, a: torch.reciprocal(xs[0])),
    "relu": Case(_unary(NUMERIC), lambda xs, a: F.relu(xs[0])),
    "abs": Case(_unary(NUMERIC), lambda xs, a: torch.abs(xs[0])),
    "relu6": Case(_unary(FLOATS), lambda xs, a: F.relu6(xs[0])),
    "hardsigmoid": Case(_unary(FLOATS), lambda xs, a: F.hardsigmoid(xs[0])),
    "hardswish": Case(_unary(FLOATS), lambda xs, a: F.hardswish(xs[0])),
    "logical_not": Case(_unary(ALL), lambda xs, a: torch.logical_not(xs[0])),
    "hardtanh": Case(_unary(FLOATS, min_val=st.floats(-2, 0), max_val=st.floats(0.1, 2)),
                     lambda xs, a: F.hardtanh(xs[0], a["min_val"], a["max_val"])),
    "clamp": Case(_bounds, lambda xs, a: torch.clamp(xs[0], a["min"], a["max"])
                  if a["min"] is not None or a["max"] is not None else xs[0]),
    "gelu": Case(_unary(FLOATS, approximate=st.sampled_from(["none", "tanh"])),
                 lambda xs, a: F.gelu(xs[0], approximate=a["approximate"])),
    "dropout": Case(_unary(FLOATS, p=st.floats(0, 0.9)),
                    lambda xs, a: F.dropout(xs[0], a["p"], training=False)),
    "where": Case(_where, lambda xs, a: torch.where(*xs)),
    "masked_fill": Case(_masked_fill, lambda xs, a: torch.masked_fill(xs[0], xs[1], a["value"])),
    "sum": Case(_reduce(NUMERIC + [torch.bool]), _reduced(torch.sum)),
    "mean": Case(_reduce(FLOATS), _reduced(torch.mean)),
    "var": Case(_var, lambda xs, a: torch.var(xs[0], dim=a["dim"] or None,
                                              correction=a["correction"], keepdim=a["keepdim"]),
                tol=1e-5),
    "amax": Case(_reduce(NUMERIC), lambda xs, a: torch.amax(xs[0], a["dim"], a["keepdim"])),
    "cast": Case(_cast, lambda xs, a: xs[0].to(DType(a["dtype"]).torch)),
    "to_layout": Case(_layout, lambda xs, a: xs[0]),
    "to_device": Case(_unary(NUMERIC, device=st.sampled_from(["cpu", "cuda"])),
                      lambda xs, a: xs[0]),
    "quantize": Case(_quantize, _numpy_quantize),
    "dequantize": Case(_dequantize, _numpy_dequantize),
}
