"""axpy: `a * x + y` over two float vectors, a memory-bound one-kernel model."""

from __future__ import annotations

import torch
from torch import nn


class Axpy(nn.Module):
    """`a * x + y` with the scalar `a` a Python constant."""

    def __init__(self, a: float = 2.5):
        super().__init__()
        self.a = a

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.a * x + y


def axpy(batch: int = 1, size: int = 100_000):
    """Two `(batch, size)` inputs: by default one vector of 100k floats each."""
    torch.manual_seed(0)
    return Axpy().eval(), (torch.randn(batch, size), torch.randn(batch, size))
