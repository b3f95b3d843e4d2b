"""MobileNetV3's activations, `hardswish` and `hardsigmoid`, are catalog ops: nn.Hardswish
(in place too) and nn.Hardsigmoid import as them, compile to kernels with no torch fallback,
and match torch eager in f32 and f64; their written-out forms (`x * relu6(x + 3) / 6`) are
rewritten to them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import cuvil
from cuvil.ops import registry


class SqueezeExcite(nn.Module):
    """A MobileNetV3 block's tail: a linear layer, h-swish in place, an h-sigmoid gate."""

    def __init__(self, width: int = 24):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.act = nn.Hardswish(inplace=True)
        self.gate = nn.Hardsigmoid()

    def forward(self, x):
        y = self.act(self.fc(x))
        return y * self.gate(x) + F.hardswish(x)


def ops(graph) -> list[str]:
    return [n.op for n in graph if n.op not in ("input", "const", "scalar")]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_model_using_them_compiles_without_fallback_and_matches_eager(dtype):
    torch.manual_seed(0)
    model = SqueezeExcite().to(dtype).eval()
    x = torch.randn(16, 24, dtype=dtype) * 4  # across both kinks, at -3 and 3
    x[0, :4] = torch.tensor([-3.0, 3.0, 0.0, -10.0], dtype=dtype)
    compiled = cuvil.compile(model, (x,))
    assert compiled.report.fallbacks == []
    assert compiled.graph.import_report.fallbacks == []
    assert {"hardswish", "hardsigmoid"} <= set(ops(compiled.graph))
    expected = model(x.clone())
    torch.testing.assert_close(compiled(x), expected)
    x2 = torch.randn(5, 24, dtype=dtype) * 4  # another batch size (dim 0 is symbolic)
    torch.testing.assert_close(compiled(x2), model(x2.clone()))


def test_their_references_are_torchs():
    x = torch.cat([torch.linspace(-8, 8, 1601, dtype=torch.float64),
                   torch.tensor([float("nan"), float("inf"), -float("inf")],
                                dtype=torch.float64)])
    for name, fn in [("hardswish", F.hardswish), ("hardsigmoid", F.hardsigmoid)]:
        for dtype in (torch.float32, torch.float64):
            xs = x.to(dtype)
            torch.testing.assert_close(registry.get(name).ref([xs], {}), fn(xs),
                                       rtol=0, atol=0, equal_nan=True)


def test_written_out_forms_become_the_ops():
    def written_out(x):
        return x * F.relu6(x + 3.0) / 6.0 + F.relu6(x + 3.0) / 6.0

    x = torch.randn(8, 32) * 4
    graph = cuvil.optimize(written_out, (x,))
    assert sorted(ops(graph)) == ["add", "hardsigmoid", "hardswish"]
    compiled = cuvil.compile(written_out, (x,))
    assert compiled.report.fallbacks == []
    torch.testing.assert_close(compiled(x), written_out(x))
