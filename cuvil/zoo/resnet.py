"""A ResNet bottleneck block (torchvision's `Bottleneck` shape): 1x1 reduce, 3x3, 1x1 expand,
each with batch norm, ReLU after the identity residual."""

from __future__ import annotations

import torch
from torch import nn

from cuvil.zoo.cnn import _randomize_norms


class Bottleneck(nn.Module):
    """channels -> channels/4 (1x1) -> 3x3 -> channels (1x1), plus x, then ReLU."""

    def __init__(self, channels: int = 64, reduction: int = 4):
        super().__init__()
        width = channels // reduction
        self.conv1 = nn.Conv2d(channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        return torch.relu(x + self.bn3(self.conv3(y)))


def resnet(batch: int = 8, size: int = 32, channels: int = 64):
    torch.manual_seed(0)
    model = Bottleneck(channels)
    _randomize_norms(model)
    return model.eval(), (torch.randn(batch, channels, size, size),)
