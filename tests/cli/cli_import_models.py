"""Factories for `cuvil import package.module:factory` tests."""

from __future__ import annotations

import torch


class Cumprod(torch.nn.Module):
    def forward(self, x):
        return torch.cumprod(x, dim=1).relu()


def cumprod_model():
    return Cumprod(), (torch.randn(2, 4),)


def not_a_pair():
    return 42


def broken():
    raise ValueError("no weights here")
