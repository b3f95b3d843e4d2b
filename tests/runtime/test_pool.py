"""NCHW poolings the runtime computes itself (`runtime.pool`: windows inside the image, and
global average) against torch eager, planes split between threads and not, the 2x2
stride-2 loop and the general one."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import cuvil

POOLS = {
    "max 2x2": nn.MaxPool2d(2),
    "avg 2x2": nn.AvgPool2d(2),
    "max 3x3 stride 2": nn.MaxPool2d(3, 2),
    "avg 3x3 stride 1": nn.AvgPool2d(3, 1),
    "global average": nn.AdaptiveAvgPool2d(1),
}


@pytest.mark.parametrize("pool", POOLS)
def test_runtime_pool_matches_torch(pool):
    model = POOLS[pool].eval()
    torch.manual_seed(0)
    for threads in (2, 1):
        compiled = cuvil.compile(model, (torch.randn(2, 16, 33, 32),), threads=threads)
        assert "@njit" not in compiled.source  # the runtime's function is the kernel
        for batch in (4, 1):  # 64 planes of 33x32: split between threads; then 16
            x = torch.randn(batch, 16, 33, 32)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
