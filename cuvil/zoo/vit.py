"""A ViT-style block: a convolutional patch embedding with learned positions, then one
pre-norm transformer block whose multi-head self-attention is written out in plain ops
(q/k/v linears, softmax(q k^T / sqrt(d)) v, output projection) and a GELU MLP."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class SelfAttention(nn.Module):
    """Multi-head self-attention without a mask, from matmuls and a softmax."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        d = c // self.heads
        q, k, v = (f(x).view(b, t, self.heads, d).transpose(1, 2)
                   for f in (self.q, self.k, self.v))
        att = F.softmax((q @ k.transpose(-2, -1)) / math.sqrt(d), dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, c))


class ViTBlock(nn.Module):
    """patches (conv, stride = patch) + positions -> x + attn(ln(x)) -> x + mlp(ln(x))."""

    def __init__(self, size: int = 32, patch: int = 4, dim: int = 128, heads: int = 4,
                 hidden: int = 512):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.pos = nn.Parameter(0.02 * torch.randn(1, (size // patch) ** 2, dim))
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.embed(images).flatten(2).transpose(1, 2) + self.pos
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def vit(batch: int = 4, size: int = 32, patch: int = 4, dim: int = 128, heads: int = 4):
    torch.manual_seed(0)
    model = ViTBlock(size, patch, dim, heads, hidden=4 * dim)
    return model.eval(), (torch.randn(batch, 3, size, size),)
