"""Every float dtype a model uses compiles and matches eager torch: the zoo MLP and CNN in
bf16 and f16 at assert_close's defaults for the dtype (f16/bf16 nodes run through torch,
composites computed in f32 and rounded once), and f64 activations within 1e-12 (f64 kernels
use the C library's exp, tanh and erf)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import cuvil
from cuvil.zoo.cnn import cnn
from cuvil.zoo.mlp import mlp

LOW = [torch.float16, torch.bfloat16]


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))


def _check(model: nn.Module, x: torch.Tensor, **tolerance) -> None:
    compiled = cuvil.compile(model, (x,))
    got = compiled(x)
    assert got.dtype == x.dtype
    torch.testing.assert_close(got, model(x), **tolerance)


@pytest.mark.parametrize("dtype", LOW, ids=["f16", "bf16"])
def test_low_precision_mlp(dtype):
    model, (x,) = mlp(batch=8, width=64)
    _check(model.to(dtype), x.to(dtype))


@pytest.mark.parametrize("dtype", LOW, ids=["f16", "bf16"])
def test_low_precision_cnn(dtype):
    model, (x,) = cnn(batch=2, size=16, channels=8)
    _check(model.to(dtype), x.to(dtype))


def test_bf16_second_call_and_numpy_free_output():
    """A bf16 result comes back as bfloat16 on every call (the fast path's too)."""
    model, (x,) = mlp(batch=4, width=32)
    model, x = model.to(torch.bfloat16), x.to(torch.bfloat16)
    compiled = cuvil.compile(model, (x,))
    for _ in range(2):
        torch.testing.assert_close(compiled(x), model(x))


def _f64(*layers: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*layers).double().eval()


F64_MODELS = {
    "gelu_erf": lambda: _f64(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)),
    "gelu_tanh": lambda: _f64(nn.Linear(16, 32), nn.GELU(approximate="tanh"),
                              nn.Linear(32, 8)),
    "exp": lambda: _f64(nn.Linear(16, 32), _Exp()),
    "tanh": lambda: _f64(nn.Linear(16, 32), nn.Tanh()),
    "sigmoid": lambda: _f64(nn.Linear(16, 32), nn.Sigmoid()),
    "silu": lambda: _f64(nn.Linear(16, 32), nn.SiLU()),
}


class _Exp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x)


@pytest.mark.parametrize("name", list(F64_MODELS))
def test_f64_activations_match_torch(name):
    model = F64_MODELS[name]()
    x = torch.randn(4, 16, dtype=torch.float64) * 3
    _check(model, x, rtol=1e-12, atol=1e-12)


def test_f64_gelu_mlp():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(),
                          nn.Linear(128, 10)).double().eval()
    _check(model, torch.randn(8, 64, dtype=torch.float64), rtol=1e-12, atol=1e-12)
