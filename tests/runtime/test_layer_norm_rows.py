"""Layer norm of contiguous rows is the runtime's `layer_norm_rows` itself: nothing
generated, and torch eager's results over one and two normalized dims, with rows split
between threads and not."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import cuvil


@pytest.mark.parametrize("shape", [(64,), (4, 16)], ids=["last dim", "two dims"])
def test_layer_norm_is_the_runtime_and_matches_torch(shape):
    torch.manual_seed(0)
    model = nn.LayerNorm(shape, eps=1e-3).eval()
    with torch.no_grad():
        model.weight.normal_()
        model.bias.normal_()
    for threads in (2, 1):
        compiled = cuvil.compile(model, (torch.randn(2, 8, *shape),), threads=threads)
        assert "= layer_norm_rows  #" in compiled.source and "@njit" not in compiled.source
        for batch in (300, 1):  # 2400 rows split between threads; 8 rows on one
            x = torch.randn(batch, 8, *shape) * 3 + 1
            with torch.no_grad():
                torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
