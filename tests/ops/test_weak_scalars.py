"""A number standing for a tensor (a `scalar` node) is weak: the elementwise dtype rule
agrees with torch's `result_type` for every pairing of a number with a dimensioned or
0-d tensor, and so does the reference executor."""

from __future__ import annotations

import itertools

import pytest
import torch

from cuvil.errors import CuvilError
from cuvil.ir.graph import Graph
from cuvil.ir.types import DType, TensorType
from cuvil.ops.elementwise import result_dtype
from cuvil.ops.execute import run

NUMBERS = {DType.f32: 0.5, DType.i64: 2, DType.bool: True}
TENSOR_DTYPES = [DType.f32, DType.f16, DType.bf16, DType.f64, DType.i32, DType.i64,
                 DType.u8, DType.bool]


@pytest.mark.parametrize(("dtype", "shape", "number"), [
    (d, s, n) for d, s, n in itertools.product(TENSOR_DTYPES, [(), (2, 3)], NUMBERS)])
def test_number_meets_tensor_as_in_torch(dtype, shape, number):
    tensor = torch.zeros(shape, dtype=dtype.torch)
    want = torch.result_type(tensor, NUMBERS[number])
    weak = TensorType((), number, weak=True)
    assert result_dtype([TensorType(shape, dtype), weak]).torch == want
    assert result_dtype([weak, TensorType(shape, dtype)]).torch == want


@pytest.mark.parametrize(("a", "b"), list(itertools.product(TENSOR_DTYPES, repeat=2)))
def test_zero_dim_tensor_meets_dimensioned_as_in_torch(a, b):
    left, right = torch.zeros((2,), dtype=a.torch), torch.zeros((), dtype=b.torch)
    try:
        got = result_dtype([TensorType((2,), a), TensorType((), b)])
    except CuvilError:  # a dtype Cuvil lacks (u8 + i8 is i16)
        return
    assert got.torch == torch.result_type(left, right)


def test_only_scalar_nodes_are_weak():
    g = Graph()
    x = g.input("x", TensorType((), DType.bf16))
    s = g.scalar(1.5)
    y = g.add("mul", [x, s])
    z = g.add("neg", [s])
    assert g[s].type.weak and not g[y].type.weak and not g[z].type.weak
    assert g[y].type == TensorType((), DType.bf16)


@pytest.mark.parametrize(("dtype", "number"), [
    (torch.bfloat16, 1.001), (torch.float16, 0.1), (torch.int32, 3), (torch.int64, 0.5),
    (torch.bool, 2)])
def test_reference_follows_torch_eager(dtype, number):
    x = (torch.randn(()) * 4).to(dtype)
    g = Graph()
    g.set_outputs(g.add("mul", [g.input("x", TensorType((), DType.from_torch(dtype))),
                                g.scalar(number)]))
    got, want = run(g, x), x * number
    assert got.dtype == want.dtype and torch.equal(got, want)


def test_number_decides_no_device():
    from cuvil.ops.elementwise import elementwise_type

    x = TensorType((), DType.f32, device="cuda")
    assert elementwise_type([TensorType((), DType.f32, weak=True), x]).device == "cuda"
    assert elementwise_type([x, TensorType((), DType.f32, weak=True)]).device == "cuda"


@pytest.mark.parametrize("shape", [(), (2, 3)])
def test_f64_reference_takes_the_number_at_full_precision(shape):
    x = torch.randn(shape, dtype=torch.float64)
    g = Graph()
    g.set_outputs(g.add("mul", [g.input("x", TensorType(shape, DType.f64)), g.scalar(0.1)]))
    assert torch.equal(run(g, x), x * 0.1)
