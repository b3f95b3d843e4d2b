"""An MLP-Mixer block: a token-mixing MLP across the patch axis (through a transpose) and a
channel-mixing MLP, each pre-norm (LayerNorm) with GELU and a residual."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class MixerBlock(nn.Module):
    """x + token_mlp(ln(x)^T)^T, then x + channel_mlp(ln(x)); x is (batch, tokens, dim)."""

    def __init__(self, tokens: int = 64, dim: int = 128, token_hidden: int = 128,
                 channel_hidden: int = 512):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.token1, self.token2 = nn.Linear(tokens, token_hidden), nn.Linear(token_hidden, tokens)
        self.chan1, self.chan2 = nn.Linear(dim, channel_hidden), nn.Linear(channel_hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.ln1(x).transpose(1, 2)
        x = x + self.token2(F.gelu(self.token1(y))).transpose(1, 2)
        return x + self.chan2(F.gelu(self.chan1(self.ln2(x))))


def mixer(batch: int = 8, tokens: int = 64, dim: int = 128):
    torch.manual_seed(0)
    model = MixerBlock(tokens, dim, token_hidden=2 * tokens, channel_hidden=4 * dim)
    return model.eval(), (torch.randn(batch, tokens, dim),)
