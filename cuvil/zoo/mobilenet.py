"""A MobileNet-style inverted residual block: pointwise expand, depthwise conv, relu6."""

from __future__ import annotations

import torch
from torch import nn

from cuvil.zoo.cnn import _randomize_norms


class InvertedResidual(nn.Module):
    """1x1 expand -> 3x3 depthwise (groups=C) -> 1x1 project, with batch norms and relu6."""

    def __init__(self, channels: int = 16, expand: int = 4):
        super().__init__()
        hidden = channels * expand
        self.expand = nn.Sequential(nn.Conv2d(channels, hidden, 1, bias=False),
                                    nn.BatchNorm2d(hidden), nn.ReLU6())
        self.depthwise = nn.Sequential(
            nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden), nn.ReLU6())
        self.project = nn.Sequential(nn.Conv2d(hidden, channels, 1, bias=False),
                                     nn.BatchNorm2d(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.project(self.depthwise(self.expand(x)))


def mobilenet(batch: int = 16, size: int = 32, channels: int = 16):
    torch.manual_seed(0)
    model = InvertedResidual(channels)
    _randomize_norms(model)
    return model.eval(), (torch.randn(batch, channels, size, size),)
