"""Layer norm's training ops are catalog ops, no torch fallback, with torch's values, over
one or several normalized dims, f32 and f64: native_layer_norm's mean and reciprocal
standard deviation (what a training forward saves) and native_layer_norm_backward's three
gradients, with or without a weight and bias and for each output mask. For a 16-bit
input, whose statistics torch's CPU kernel keeps in f32, they run in torch and still
match."""

from __future__ import annotations

import pytest
import torch

import cuvil


class NativeLayerNorm(torch.nn.Module):
    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype):
        super().__init__()
        self.shape = shape
        self.weight = torch.nn.Parameter(torch.randn(shape, dtype=dtype))
        self.bias = torch.nn.Parameter(torch.randn(shape, dtype=dtype))

    def forward(self, x):
        y, mean, rstd = torch.ops.aten.native_layer_norm(x, self.shape, self.weight,
                                                         self.bias, 1e-5)
        return y, mean, rstd


@pytest.mark.parametrize("shape, dtype, tol", [
    ((32,), torch.float32, 1e-5), ((6, 32), torch.float32, 1e-5),
    ((32,), torch.float64, 1e-12)], ids=["f32", "f32-two-dims", "f64"])
def test_the_statistics_are_catalog_ops_with_torchs_values(shape, dtype, tol):
    torch.manual_seed(0)
    model = NativeLayerNorm(shape, dtype).eval()
    x = (torch.randn(4, 6, 32, dtype=dtype) * 3 + 1).requires_grad_(False)
    graph = cuvil.from_torch(model, (x,))
    assert "torch_op" not in graph.ops() and {"mean", "layer_norm_rstd"} <= set(graph.ops())
    with torch.no_grad():
        want = model(x)
        got = cuvil.compile(model, (x,))(x)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def test_16_bit_statistics_run_in_torch_in_f32():
    torch.manual_seed(0)
    model = NativeLayerNorm((32,), torch.bfloat16).eval()
    x = torch.randn(4, 32, dtype=torch.bfloat16)
    graph = cuvil.from_torch(model, (x,))
    assert "torch_op" in graph.ops()
    with torch.no_grad():
        want = model(x)
        got = cuvil.compile(model, (x,))(x)
    for a, b in zip(got, want, strict=True):  # torch's fake result types them bf16
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)



@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=["f64", "bf16"])
def test_a_layer_norm_without_weight_fills_its_own_dtype(dtype):
    """The ones and zeros standing for a missing weight and bias are of the input's dtype
    (no f32 constant mixed into an f64 or bf16 graph)."""
    model = torch.nn.LayerNorm(16, elementwise_affine=False, dtype=dtype).eval()
    x = torch.randn(4, 16, dtype=dtype)
    graph = cuvil.from_torch(model, (x,))
    norm = next(n for n in graph.nodes.values() if n.op == "layer_norm")
    assert {graph[i].type.dtype.torch for i in norm.inputs} == {dtype}
    with torch.no_grad():
        got, want = cuvil.compile(model, (x,))(x), model(x)
    tol = 1e-12 if dtype == torch.float64 else 2e-2
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)


class LayerNormBackward(torch.nn.Module):
    def __init__(self, shape: tuple[int, ...], affine: bool, mask: tuple[bool, ...],
                 dtype: torch.dtype):
        super().__init__()
        self.shape, self.mask = shape, list(mask)
        self.weight = torch.nn.Parameter(torch.randn(shape, dtype=dtype)) if affine else None
        self.bias = torch.nn.Parameter(torch.randn(shape, dtype=dtype)) if affine else None

    def forward(self, dy, x):
        _, mean, rstd = torch.ops.aten.native_layer_norm(x, self.shape, self.weight,
                                                         self.bias, 1e-5)
        grads = torch.ops.aten.native_layer_norm_backward(
            dy, x, self.shape, mean, rstd, self.weight, self.bias, self.mask)
        return tuple(g for g in grads if g is not None)


@pytest.mark.parametrize("shape, affine, mask, dtype, tol", [
    ((32,), True, (True, True, True), torch.float32, 1e-5),
    ((6, 32), True, (True, True, True), torch.float32, 1e-5),
    ((32,), False, (True, False, False), torch.float32, 1e-5),
    ((32,), True, (False, True, True), torch.float32, 1e-5),
    ((6, 32), True, (True, True, True), torch.float64, 1e-12)],
    ids=["f32", "f32-two-dims", "no-weight", "parameters-only", "f64"])
def test_the_gradients_are_catalog_ops_with_torchs_values(shape, affine, mask, dtype, tol):
    torch.manual_seed(0)
    model = LayerNormBackward(shape, affine, mask, dtype).eval()
    dy, x = torch.randn(4, 6, 32, dtype=dtype), torch.randn(4, 6, 32, dtype=dtype) * 3 + 1
    graph = cuvil.from_torch(model, (dy, x))
    assert "torch_op" not in graph.ops()
    with torch.no_grad():
        want = model(dy, x)
        got = cuvil.compile(model, (dy, x))(dy, x)
    assert len(got) == len(want) == sum(mask[:1]) + (sum(mask[1:]) if affine else 0)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=tol, atol=tol * 10)
