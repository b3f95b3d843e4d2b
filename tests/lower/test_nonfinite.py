"""NaN and +-inf propagate through every kernel family as through torch eager: elementwise
ops, rows (softmax, norms, reductions), GEMM and convolution epilogues, pooling (alone and
fused after a convolution) and attention (plain, causal, masked; one block of rows and
several; rows whose every score is -inf, weighed 0 as by torch's math backend). Each
model is compiled, fed inputs holding NaN, +inf and -inf, and compared with eager
(`nonfinite_support`)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from nonfinite_support import assert_nonfinite_like_eager, nonfinite, nonfinite_rows
from torch import nn


class Outputs(nn.Module):
    """Each of `fns` applied to the inputs: a tuple of their results."""

    def __init__(self, *fns):
        super().__init__()
        self.fns = fns

    def forward(self, *xs):
        return tuple(fn(*xs) for fn in self.fns)


UNARY = (F.relu, F.relu6, F.hardtanh, F.gelu, lambda x: F.gelu(x, approximate="tanh"),
         torch.sigmoid, F.silu, torch.tanh, torch.exp, torch.log, torch.sqrt, torch.rsqrt,
         torch.erf, torch.abs, torch.neg, torch.reciprocal, lambda x: x.clamp(-1, 1),
         lambda x: x.clamp(min=0.5), lambda x: x.clamp(max=0.5), lambda x: x ** 2,
         lambda x: x ** 0.5, lambda x: x * 2 + 1)
BINARY = (torch.maximum, torch.minimum, torch.div, torch.pow, torch.add, torch.mul,
          lambda x, y: torch.where(x > 0, x, y), lambda x, y: torch.maximum(y, x),
          lambda x, y: torch.relu(x) * y)


def test_elementwise_ops():
    x = nonfinite(4, 64, seed=1)
    assert_nonfinite_like_eager(Outputs(*UNARY), (x,))
    # values at which rsqrt's hardware estimate goes wrong: zeros, subnormals, +inf
    edges = torch.tensor([0.0, -0.0, 1e-40, 1e-30, float("inf"), 4.0, -1.0, 3e38] * 4)
    assert_nonfinite_like_eager(Outputs(torch.rsqrt, torch.sqrt, torch.reciprocal), (edges,))


def test_binary_ops():
    assert_nonfinite_like_eager(Outputs(*BINARY), (nonfinite(4, 64, seed=1),
                                                   nonfinite(4, 64, seed=2)))


@pytest.mark.parametrize("shape", [(2, 9, 32), (3, 18, 40)])
def test_row_ops(shape):
    ops = (lambda x: x.softmax(-1), lambda x: x.log_softmax(-1), lambda x: x.softmax(1),
           lambda x: x.log_softmax(1), lambda x: F.layer_norm(x, x.shape[-1:]),
           lambda x: x.sum(-1), lambda x: x.mean(-1), lambda x: x.amax(-1),
           lambda x: x.amax(1), lambda x: x.sum(1), lambda x: x - x.amax(-1, keepdim=True))
    assert_nonfinite_like_eager(Outputs(*ops), (nonfinite_rows(*shape),))


class Act(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class Linear(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.linear, self.act = nn.Linear(32, 24), act

    def forward(self, x):
        return self.act(self.linear(x))


ACTIVATIONS = {"none": lambda x: x, "relu": F.relu, "gelu": F.gelu,
               "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
               "relu6": F.relu6, "clamp": lambda x: x.clamp(-1, 1)}


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_gemm_epilogues(act):
    torch.manual_seed(0)
    assert_nonfinite_like_eager(Linear(ACTIVATIONS[act]).eval(), (nonfinite_rows(9, 32),))


@pytest.mark.parametrize("kernel", [1, 3])
@pytest.mark.parametrize("act", ["none", "relu", "gelu", "relu6"])
def test_conv_epilogues(kernel, act):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 8, kernel, padding=kernel // 2), nn.BatchNorm2d(8),
                          Act(ACTIVATIONS[act])).eval()
    assert_nonfinite_like_eager(model, (nonfinite(2, 4, 8, 8, seed=3),))


POOLS = {"max 2x2": lambda: nn.MaxPool2d(2), "max 3x3 padded": lambda: nn.MaxPool2d(3, 1, 1),
         "max 3x3 stride 2": lambda: nn.MaxPool2d(3, 2), "avg 2x2": lambda: nn.AvgPool2d(2),
         "avg padded": lambda: nn.AvgPool2d(3, 1, 1), "global avg": lambda: nn.AdaptiveAvgPool2d(1),
         "conv relu max": lambda: nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(),
                                                nn.MaxPool2d(2)),
         "conv max": lambda: nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.MaxPool2d(2))}


@pytest.mark.parametrize("pool", POOLS)
def test_pooling(pool):
    torch.manual_seed(0)
    x = nonfinite(2, 4, 8, 8, seed=3, share=0.03)
    assert_nonfinite_like_eager(POOLS[pool]().eval(), (x,))


class Attention(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind

    def forward(self, q, k, v):
        n, s = q.shape[-2], k.shape[-2]
        if self.kind == "causal":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if self.kind == "boolean mask":
            mask = torch.ones(n, s, dtype=torch.bool).tril()
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        if self.kind == "added mask":
            mask = torch.zeros(n, s)
            mask[:, s - 5:] = float("-inf")
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return F.scaled_dot_product_attention(q, k, v)


def _qkv(length: int):
    """q, k, v [2, 2, length, 16] with one non-finite value each, at keys some rows do not
    see under a causal mask, and, in the last two, NaN and +-inf everywhere."""
    q, k, v = (torch.randn(2, 2, length, 16, generator=torch.Generator().manual_seed(s))
               for s in range(3))
    k[0, 0, length - 3, 3], v[0, 1, length - 2, 2] = float("nan"), float("inf")
    k[1, 0, length - 1, 1], q[1, 1, length // 4, 0] = float("inf"), float("-inf")
    return q, k, v


@pytest.mark.parametrize("length", [8, 64])
@pytest.mark.parametrize("kind", ["plain", "causal", "boolean mask", "added mask"])
def test_attention(kind, length):
    assert_nonfinite_like_eager(Attention(kind), _qkv(length))
    everywhere = (nonfinite(2, 2, length, 16, seed=4, share=0.02),
                  nonfinite(2, 2, length, 16, seed=5, share=0.02), torch.randn(2, 2, length, 16))
    assert_nonfinite_like_eager(Attention(kind), everywhere)


def masked_rows(*shape: int) -> tuple[torch.Tensor, ...]:
    """q, k, v of `shape` (..., L, 16) whose q rows 0 and L // 2 score -inf against every key
    (+inf at a column where every key is negative), and one +inf in v at key 3: torch's
    math backend weighs those rows' keys 0 (`_safe_softmax`), so they are 0, NaN in v's
    +inf column, where an unguarded softmax is NaN throughout (exp(-inf - -inf))."""
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(shape, generator=g) for _ in range(3))
    k[..., 5] = -k[..., 5].abs() - 0.1
    for row in (0, shape[-2] // 2):
        q[..., row, :] = 0.0
        q[..., row, 5] = float("inf")
    v.view(-1, *shape[-2:])[0, 3, 2] = float("inf")
    return q, k, v


@pytest.mark.parametrize("rank", [3, 4])  # 3: the generated kernel, 4: `attention_post`
@pytest.mark.parametrize("kind", ["plain", "causal", "added mask"])
def test_attention_row_of_minus_inf_scores(kind, rank):
    shape = (4, 24, 16) if rank == 3 else (2, 2, 24, 16)
    assert_nonfinite_like_eager(Attention(kind), masked_rows(*shape))
