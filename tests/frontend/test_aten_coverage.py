"""Many aten ops at once: each maps to catalog ops (no fallback), the graph matches eager
at two batch sizes, and arguments the catalog cannot express fall back to torch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim

import cuvil
from cuvil.ops.execute import run


class Sequence(nn.Module):
    """Token ids -> embeddings -> masked attention -> pooled features (B, T) inputs."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(10, 8)
        self.proj = nn.Linear(8, 24, bias=False)

    def forward(self, ids, scores):
        x = self.embed(ids)                                   # embedding
        q, k, v = self.proj(x).chunk(3, dim=-1)               # chunk -> slices
        q, k, v = (t.unflatten(-1, (2, 4)).permute(0, 2, 1, 3) for t in (q, k, v))
        mask = torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool).tril()
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        b = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)
        y = torch.cat([a, b], dim=1).transpose(1, 2).flatten(2)    # cat, transpose, flatten
        gate = torch.sigmoid(scores).unsqueeze(-1)
        y = torch.where(gate > 0.5, y, -y) * gate.expand_as(y)     # gt, where, neg, expand
        stats = [y.sum(1), y.mean(-1, keepdim=True).squeeze(-1), y.amax((1, 2))]
        z = F.log_softmax(y, -1)[:, 0] + F.softmax(y, 1).select(1, -1)
        return stats, z.pow(2).sqrt() - 1 / (1 + z.abs()).rsqrt()


class Vision(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(4, 6, 3, stride=2, padding="valid", dilation=1, groups=2)
        self.same = nn.Conv2d(6, 6, 3, padding="same")

    def forward(self, x):
        y = F.silu(self.same(self.conv(x)))
        y = F.avg_pool2d(y, 2, ceil_mode=True) + F.max_pool2d(y, 3, 2, 1)[..., :1, :1]
        y = torch.clamp(F.gelu(y), -0.5, 2.0) * torch.tanh(y).exp() - torch.erf(y).log1p()
        parts = torch.split(y, [2, 4], dim=1)
        w = parts[0].to(torch.float64).sum((2, 3)).type_as(y)
        return torch.maximum(w, parts[1].amax((2, 3))[:, :2]) / 3 - (2 - w) ** 0.5


BATCH_ONLY = ({0: Dim("batch")}, {0: Dim("batch")})  # a static length: `tril` folds


@pytest.mark.parametrize("model, make, spec", [
    (Sequence(), lambda b: (torch.randint(0, 10, (b, 5)), torch.randn(b, 5)), BATCH_ONLY),
    (Vision(), lambda b: (torch.randn(b, 4, 11, 11),), None),
])
def test_models_with_many_aten_ops_map_to_the_catalog(model, make, spec):
    model.eval()
    graph = cuvil.from_torch(model, make(2), dynamic_shapes=spec)
    report = graph.import_report
    assert report.dynamic
    fallbacks = {op for op, _ in report.fallbacks}
    assert fallbacks <= {"aten.log1p.default"}, report
    for batch in (1, 4):
        args = make(batch)
        with torch.no_grad():
            want = model(*args)
        got = run(graph, *args)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)


class RoundingDiv(nn.Module):
    def forward(self, x):
        return torch.div(x, 3, rounding_mode="floor") + F.dropout(x, 0.5, training=False)


def test_arguments_without_a_catalog_form_fall_back_to_torch():
    graph = cuvil.from_torch(RoundingDiv(), (torch.randn(2, 3),))
    assert [op for op, _ in graph.import_report.fallbacks] == ["aten.div.Tensor_mode"]
    assert "dropout" in graph.ops()
    x = torch.randn(4, 3)
    torch.testing.assert_close(run(graph, x), RoundingDiv()(x))
