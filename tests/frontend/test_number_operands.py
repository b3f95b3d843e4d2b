"""A Python number in a model is weak, as in torch: `x + 0.0`, `x * 2`, `x - 1.5` keep a
low-precision or f64 `x`'s dtype (0-d included), and an integer tensor plus a float gives
the default float dtype; each compiles and matches torch eager in dtype and value."""

from __future__ import annotations

import pytest
import torch

import cuvil


class Apply(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


OPS = {"add_zero": lambda x: x + 0.0, "mul_two": lambda x: x * 2,
       "sub_one_half": lambda x: x - 1.5}
CASES = [(torch.bfloat16, ()), (torch.float16, ()), (torch.float16, (3, 4)),
         (torch.bfloat16, (3, 4)), (torch.float64, (3, 4))]


def compiled_matches_eager(fn, x):
    got, want = cuvil.compile(Apply(fn), (x,))(x), fn(x)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(("dtype", "shape"), CASES, ids=lambda c: str(c))
def test_number_keeps_the_tensor_dtype(op, dtype, shape):
    compiled_matches_eager(OPS[op], (torch.randn(shape) * 3).to(dtype))


@pytest.mark.parametrize("shape", [(), (2, 3)])
def test_integer_tensor_plus_float_is_default_float(shape):
    x = torch.arange(6).reshape(shape) if shape else torch.tensor(4)
    compiled_matches_eager(lambda x: x + 0.5, x)


def test_int32_times_int_stays_int32():
    compiled_matches_eager(lambda x: x * 3, torch.tensor(7, dtype=torch.int32))
