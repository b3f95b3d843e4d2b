"""The attention template: `scaled_dot_product_attention` (plain, bool mask, float mask,
causal, explicit scale) and the same computation written out, as in a GPT-2 block; the
head split and merge around it read and written in place."""

from __future__ import annotations

import pytest
import torch
from lowering_support import B, assert_matches_reference, call_templates, t, templates

import cuvil
from cuvil.ir import Graph


@pytest.fixture(scope="module")
def sdpa_graph(lower):
    g = Graph("sdpa")
    q, k, v = (g.input(n, t(B, 2, s, d)) for n, s, d in (("q", 5, 8), ("k", 7, 8),
                                                           ("v", 7, 4)))
    keep = g.input("keep", t(5, 7, dtype="bool"))
    bias = g.input("bias", t(B, 1, 5, 7))
    outs = (g.add("scaled_dot_product_attention", [q, k, v]),
            g.add("scaled_dot_product_attention", [q, k, v, keep]),
            g.add("scaled_dot_product_attention", [q, k, v, bias], {"scale": 0.2}),
            g.add("scaled_dot_product_attention", [q, q, q], {"is_causal": True}))
    g.set_outputs(outs)
    return g, lower(g, threads=1)  # serial kernels compile 4x faster; the zoo tests run parallel


@pytest.mark.parametrize("batch", [1, 3])
def test_sdpa(sdpa_graph, batch):
    g, compiled = sdpa_graph
    assert call_templates(compiled) == ["attention"] * 4
    # the rank-2 mask is generated code; the others are the runtime's `attention_post`
    assert compiled.source.count("@njit") == 1 and "= attention_post  #" in compiled.source
    torch.manual_seed(batch)
    inputs = (torch.randn(batch, 2, 5, 8), torch.randn(batch, 2, 7, 8),
              torch.randn(batch, 2, 7, 4), torch.rand(5, 7) > 0.3, torch.randn(batch, 1, 5, 7))
    assert_matches_reference(g, compiled, inputs)


@pytest.fixture(scope="module")
def written_out(lower):
    """softmax(masked_fill(q @ k^T * s, causal == 0, -inf)) @ v, as GPT-2 writes it."""
    g = Graph("gpt_attention")
    q, k, v = (g.input(n, t(B, 2, 6, 4)) for n in "qkv")
    causal = g.const(torch.tril(torch.ones(8, 8)).view(1, 1, 8, 8), "bias")
    mask = g.add("eq", [g.add("slice", [g.add("slice", [causal], {"dim": 2, "end": 6})],
                                {"dim": 3, "end": 6}), g.scalar(0.0)])
    s = g.add("mul", [g.add("matmul", [q, g.add("transpose", [k], {"dim0": -2, "dim1": -1})]),
                      g.scalar(0.5)])
    p = g.add("softmax", [g.add("masked_fill", [s, mask], {"value": float("-inf")})])
    g.set_outputs(g.add("matmul", [p, v]))
    return g, lower(g)


def test_written_out_attention_is_one_kernel(written_out):
    g, compiled = written_out
    assert templates(compiled).count("attention") == 1
    attention = next(k for k in compiled.report.kernels if k.template == "attention")
    assert len(attention.nodes) == 6  # transpose, matmul, mul, masked_fill, softmax, matmul
    for batch in (1, 4):
        torch.manual_seed(batch)
        inputs = tuple(torch.randn(batch, 2, 6, 4) for _ in range(3))
        assert_matches_reference(g, compiled, inputs)


class HeadSplit(torch.nn.Module):
    """Multi-head self-attention as ViT writes it: q, k, v linear layers, the head split
    `view(b, n, h, d).transpose(1, 2)`, attention (SDPA or written out), the head merge
    `transpose(1, 2).reshape(b, n, c)`, a projection. `leak` also returns k after the
    split, so that its copy must stay."""

    def __init__(self, sdpa: bool, leak: bool = False, fused: bool = False, dim: int = 24,
                 heads: int = 3):
        super().__init__()
        self.qkv = torch.nn.Linear(dim, 3 * dim) if fused else \
            torch.nn.ModuleList(torch.nn.Linear(dim, dim) for _ in range(3))
        self.proj, self.heads, self.sdpa, self.leak = torch.nn.Linear(dim, dim), heads, sdpa, leak

    def forward(self, x):
        b, n, c = x.shape
        parts = self.qkv(x).split(c, dim=2) if isinstance(self.qkv, torch.nn.Linear) else \
            [f(x) for f in self.qkv]
        q, k, v = (p.view(b, n, self.heads, c // self.heads).transpose(1, 2) for p in parts)
        if self.sdpa:
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        else:
            a = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1) @ v
        y = self.proj(a.transpose(1, 2).reshape(b, n, c))
        return (y, k) if self.leak else y


@pytest.mark.parametrize("fused", [False, True], ids=["q k v layers", "one qkv layer"])
@pytest.mark.parametrize("sdpa", [True, False], ids=["sdpa", "written out"])
@pytest.mark.parametrize("leak", [False, True], ids=["private", "k also returned"])
def test_heads_split_and_merged_in_place(sdpa, leak, fused):
    """The head split of q, k, v (each its own layer's output, or a slice of one fused
    projection's, as GPT-2 has it) and the merge of the output are no copies of their own:
    the attention driver reads and writes them in place (`templates.heads`), except where
    another consumer needs the split value (then that one copy stays)."""
    torch.manual_seed(3)
    model = HeadSplit(sdpa, leak, fused).eval()
    compiled = cuvil.compile(model, (torch.randn(2, 10, 24),))
    copies = [k for k in compiled.report.kernels if k.template == "copy"]
    assert "(heads in place)" in compiled.source and len(copies) == int(leak)
    x = torch.randn(3, 10, 24)
    with torch.inference_mode():
        expected = model(x)
    torch.testing.assert_close(compiled(x), expected, atol=2e-6, rtol=1e-5)
