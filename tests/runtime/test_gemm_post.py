"""Products with the common epilogue (bias, GELU exact or tanh, residual, ReLU) are the runtime's
`linear_post` itself: nothing generated, and the results of torch eager for each epilogue,
input rank, row count (`gemv` for a few rows, the tile for more; rows split between
threads for the epilogue of a large output) and thread count."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import cuvil

TANH_RULES = """
ruleset fusion_linear_tanh
op linear_tanh(x, w, b) = tanh(linear(x, w, b))
rule linear_tanh: tanh(linear(x, w, b)) => linear_tanh(x, w, b)
"""

EPILOGUES = {
    "none": lambda y, x: y,
    "relu": lambda y, x: torch.relu(y),
    "gelu": lambda y, x: nn.functional.gelu(y),
    "tanh gelu": lambda y, x: nn.functional.gelu(y, approximate="tanh"),
    "residual": lambda y, x: y + x,
}


class LinearThen(nn.Module):
    def __init__(self, features: int, epilogue: str):
        super().__init__()
        self.fc = nn.Linear(features, features, bias=epilogue != "none")
        self.epilogue = EPILOGUES[epilogue]

    def forward(self, x):
        return self.epilogue(self.fc(x), x)


@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("shape", [(2, 96), (3, 40, 96)], ids=["rank 2", "rank 3"])
def test_the_driver_is_the_kernel_and_matches_torch(epilogue, shape):
    torch.manual_seed(0)
    model = LinearThen(shape[-1], epilogue).eval()
    for threads in (2, 1):
        compiled = cuvil.compile(model, (torch.randn(*shape),), threads=threads)
        assert [k.template for k in compiled.report.kernels] == ["gemm"]
        assert "k0_gemm = linear_post  #" in compiled.source
        assert "@njit" not in compiled.source  # nothing generated to compile
        for rows in (1, 500):  # gemv; the tile, and a split epilogue at two threads
            x = torch.randn(rows, *shape[1:])
            with torch.no_grad():
                torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)


def test_another_epilogue_is_generated():
    """A tanh (a user's fused `linear_tanh`) is not the driver's: the epilogue is generated
    code."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.Tanh()).eval()
    x = torch.randn(4, 32)
    compiled = cuvil.compile(model, (x,), threads=2, rules=[None, TANH_RULES])
    assert [k.template for k in compiled.report.kernels] == ["gemm"]
    assert "linear_post" not in compiled.source
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
