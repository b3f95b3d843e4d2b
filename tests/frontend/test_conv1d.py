"""`nn.Conv1d` / `F.conv1d` import as the catalog's `conv2d` over a height of 1 (an
`unsqueeze` before, a `squeeze` after, the weight unsqueezed at import), so Whisper's
encoder stem needs no torch fallback; each matches eager at other batches. A symbolic length
(the conv2d kernels take static widths) still runs through torch."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.export import Dim

import cuvil

CASES = [dict(kernel_size=3, padding=1), dict(kernel_size=3, stride=2, padding=1),
         dict(kernel_size=2, dilation=2), dict(kernel_size=3, padding="same", bias=False),
         dict(kernel_size=1), dict(kernel_size=4, padding=2)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kw", CASES, ids=str)
def test_conv1d_is_native_and_matches_eager(kw, dtype):
    torch.manual_seed(0)
    model = nn.Conv1d(4, 8, **kw).to(dtype).eval()
    spec = ({0: Dim("batch")},)
    fast = cuvil.compile(model, (torch.randn(2, 4, 11, dtype=dtype),), dynamic_shapes=spec)
    assert fast.report.fallbacks == []
    assert "conv2d" in {n.op for n in fast.graph}
    for shape in ((2, 4, 11), (1, 4, 11), (5, 4, 11)):
        x = torch.randn(shape, dtype=dtype)
        with torch.no_grad():
            torch.testing.assert_close(fast(x), model(x), rtol=1e-5, atol=1e-5)


class Functional(nn.Module):
    """A weight that is an input, not a constant: it is unsqueezed in the graph, and the
    catalog's conv2d arranges it at the call, as any conv2d of a computed weight."""

    def forward(self, x, w):
        return nn.functional.gelu(nn.functional.conv1d(x, w, stride=2))


def test_conv1d_of_a_weight_input_matches_eager():
    x, w = torch.randn(2, 3, 9), torch.randn(5, 3, 3)
    fast = cuvil.compile(Functional(), (x, w))
    assert not [f.op for f in fast.report.fallbacks if f.op.startswith("torch_op")]
    torch.testing.assert_close(fast(x, w), Functional()(x, w), rtol=1e-5, atol=1e-5)


def test_conv1d_over_a_symbolic_length_runs_in_torch():
    model = nn.Conv1d(4, 8, 3, padding=1).eval()
    spec = ({0: Dim("batch"), 2: Dim("length", min=4)},)
    fast = cuvil.compile(model, (torch.randn(2, 4, 11),), dynamic_shapes=spec)
    assert {f.op for f in fast.report.fallbacks} == {"torch_op aten.conv1d.default"}
    x = torch.randn(3, 4, 7)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x))
