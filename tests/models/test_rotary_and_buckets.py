"""The position blocks of real transformers compile with no op left to torch: LLaMA's rotary
embedding (positions from `arange`, of a static or a symbolic length, `sin`/`cos`, halves
rotated by slices and `cat`) and T5's relative-position buckets (`min` of two tensors,
`where`, `log`, a clamp by a tensor bound), each equal to eager."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import cuvil


class Rotary(nn.Module):
    """q and k rotated by their position's angles, as LLaMA's `apply_rotary_pos_emb`."""

    def __init__(self, head_dim: int = 8, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq)

    @staticmethod
    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def forward(self, q: torch.Tensor, k: torch.Tensor, start: torch.Tensor):
        positions = torch.arange(q.shape[2]) + start  # [seq], from the cache's offset
        freqs = positions[:, None].float() * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        return q * cos + self.rotate_half(q) * sin, k * cos + self.rotate_half(k) * sin


def relative_bucket(relative: torch.Tensor, num_buckets: int = 16,
                    max_distance: int = 64) -> torch.Tensor:
    """T5's `_relative_position_bucket`, unidirectional (the decoder's)."""
    relative = -torch.min(relative, torch.zeros_like(relative))
    max_exact = num_buckets // 2
    is_small = relative < max_exact
    large = max_exact + (torch.log(relative.float() / max_exact)
                         / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return torch.where(is_small, relative, large)


class Buckets(nn.Module):
    """T5's position bias: buckets of key - query positions, looked up per head."""

    def __init__(self, num_buckets: int = 16, heads: int = 2):
        super().__init__()
        torch.manual_seed(0)
        self.bias = nn.Embedding(num_buckets, heads)
        self.num_buckets = num_buckets

    def forward(self, scores: torch.Tensor, query_pos: torch.Tensor, key_pos: torch.Tensor):
        relative = key_pos[None, :] - query_pos[:, None]
        buckets = relative_bucket(relative, self.num_buckets)
        bias = self.bias(buckets).permute(2, 0, 1)  # [heads, q, k]
        return torch.clamp(scores + bias, -query_pos[:, None].float(), key_pos.float())


def fallbacks(compiled) -> list[str]:
    return [line for line in str(compiled.report).splitlines() if "fallback to torch" in line]


def test_rotary_embedding_is_native_and_matches_eager():
    torch.manual_seed(0)
    q, k = torch.randn(2, 2, 12, 8), torch.randn(2, 2, 12, 8)
    start = torch.tensor(5)
    model = Rotary()
    compiled = cuvil.compile(model, (q, k, start))
    assert fallbacks(compiled) == []
    ops = {n.op for n in cuvil.from_torch(model, (q, k, start))}
    assert {"sin", "cos"} <= ops  # computed per call, not folded
    for batch in (2, 3):
        q, k = torch.randn(batch, 2, 12, 8), torch.randn(batch, 2, 12, 8)
        torch.testing.assert_close(compiled(q, k, start), model(q, k, start))


def test_rotary_embedding_over_a_symbolic_length_is_native():
    """With the length symbolic, the positions are an `arange` node, not a constant."""
    from torch.export import Dim

    batch, seq = Dim("batch"), Dim("seq")
    spec = {"q": {0: batch, 2: seq}, "k": {0: batch, 2: seq}, "start": None}
    q, k, start = torch.randn(2, 2, 12, 8), torch.randn(2, 2, 12, 8), torch.tensor(3)
    model = Rotary()
    compiled = cuvil.compile(model, (q, k, start), dynamic_shapes=spec)
    assert fallbacks(compiled) == []
    assert "arange" in {n.op for n in cuvil.from_torch(model, (q, k, start), spec)}
    for batch, seq in ((2, 12), (1, 5), (3, 17)):
        q, k = torch.randn(batch, 2, seq, 8), torch.randn(batch, 2, seq, 8)
        torch.testing.assert_close(compiled(q, k, start), model(q, k, start))


@pytest.mark.parametrize("offset", [0, 40])
def test_relative_position_buckets_are_native_and_match_eager(offset):
    torch.manual_seed(0)
    model = Buckets()
    scores = torch.randn(2, 6, 6) * 4
    query_pos, key_pos = torch.arange(6) + offset, torch.arange(6)
    compiled = cuvil.compile(model, (scores, query_pos, key_pos), dynamic_shapes=False)
    assert fallbacks(compiled) == []
    ops = {n.op for n in cuvil.from_torch(model, (scores, query_pos, key_pos),
                                          dynamic_shapes=False)}
    assert {"minimum", "where", "log", "maximum"} <= ops
    torch.testing.assert_close(compiled(scores, query_pos, key_pos),
                               model(scores, query_pos, key_pos))
