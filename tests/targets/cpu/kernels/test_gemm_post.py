"""Products with the common epilogue (bias, GELU exact or tanh, residual, ReLU) are the runtime's
`linear_post` itself: nothing generated, and the results of torch eager for each epilogue,
input rank, row count (`gemv` for a few rows, the tile for more; rows split between
threads for the epilogue of a large output) and thread count. `linear_post` called
directly on packed f32 panels (the epilogue in the tile's stores; BLAS and a second pass
past PANEL_MAX_ROWS rows) against float64 numpy, NaN included."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch import nn

import cuvil
from cuvil.targets.cpu.kernels.blas import PANEL_MAX_ROWS
from cuvil.targets.cpu.kernels.gemm_post import linear_post
from cuvil.targets.cpu.templates.gemm import panels

TANH_RULES = """
ruleset fusion_linear_tanh
op linear_tanh(x, w, b) = tanh(linear(x, w, b)) kernel gemm
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


def _reference(a, w, bias, res, clip, gelu):
    y = a.astype(np.float64) @ w + (bias if bias.size else 0)
    if gelu:
        y = torch.nn.functional.gelu(torch.from_numpy(y)).numpy()
    y = y + (res if res.size else 0)
    return np.where(y < clip[0], clip[0], np.where(y > clip[1], clip[1], y))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 3, 8, 11, 64, PANEL_MAX_ROWS + 1]), st.integers(0, 70),
       st.integers(1, 80), st.booleans(), st.booleans(), st.sampled_from(["none", "relu",
                                                                         "relu6"]),
       st.booleans(), st.sampled_from([1, 2]))
@example(11, 52, 51, True, True, "relu", False, 2)  # 8-row and 3-row tiles, column tails
@example(1, 33, 40, True, True, "relu6", False, 1)  # the one-row tile
def test_epilogue_in_the_tiles_stores(m, k, n, with_bias, with_res, clip, gelu, parts):
    """Every combination of bias, residual, clip and GELU (which the tile leaves to the
    second pass), on one-row and 8-row tiles with row and column tails; a NaN in the input
    and in the residual stays NaN through the clip, as in torch."""
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32) if with_bias else np.zeros(0, np.float32)
    res = rng.standard_normal((m, n)).astype(np.float32) if with_res else np.zeros(
        (0, 0), np.float32)
    if k:
        a[-1, 0] = np.nan
    if with_res:
        res[0, -1] = np.nan
    bounds = {"none": (-np.inf, np.inf), "relu": (0, np.inf), "relu6": (0, 6)}[clip]
    lims = np.array(bounds, np.float32)
    out = np.full((m, n), 7.5, np.float32)
    linear_post(a, w, panels(w), bias, res, lims, np.array([int(gelu), 3, 1 << 14]), parts,
                out)
    np.testing.assert_allclose(out, _reference(a, w, bias, res, lims, gelu), rtol=1e-4,
                               atol=1e-4)
