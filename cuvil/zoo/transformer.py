"""`nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True)`, torch's own layer."""

from __future__ import annotations

import torch
from torch import nn


def transformer(batch: int = 8, seq: int = 128, d_model: int = 256, heads: int = 4,
                ff: int = 1024):
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(d_model, heads, ff, batch_first=True)
    return model.eval(), (torch.randn(batch, seq, d_model),)
