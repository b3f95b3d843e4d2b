"""Multi-layer perceptrons: 784-512-512-10 with ReLU, and a GELU + LayerNorm variant."""

from __future__ import annotations

import itertools

import torch
from torch import nn


class MLP(nn.Module):
    """Linear-ReLU-Linear-ReLU-Linear, the MNIST classic."""

    def __init__(self, sizes: tuple[int, ...] = (784, 512, 512, 10)):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(sizes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:-1]:
            x = torch.relu(layer(x))
        return self.layers[-1](x)


class GeluMLP(nn.Module):
    """Pre-norm blocks: LayerNorm, Linear, GELU, then a linear head."""

    def __init__(self, sizes: tuple[int, ...] = (784, 512, 512, 10)):
        super().__init__()
        pairs = list(itertools.pairwise(sizes))
        self.norms = nn.ModuleList(nn.LayerNorm(a) for a, _ in pairs[:-1])
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in pairs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for norm, layer in zip(self.norms, self.layers, strict=False):
            x = nn.functional.gelu(layer(norm(x)))
        return self.layers[-1](x)


def mlp(batch: int = 64, width: int = 512):
    torch.manual_seed(0)
    model = MLP((784, width, width, 10))
    return model.eval(), (torch.randn(batch, 784),)


def mlp_gelu(batch: int = 64, width: int = 512):
    torch.manual_seed(0)
    model = GeluMLP((784, width, width, 10))
    return model.eval(), (torch.randn(batch, 784),)
