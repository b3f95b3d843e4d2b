"""A small CNN: conv-bn-relu blocks, a residual add, max-pool, adaptive pool, linear head."""

from __future__ import annotations

import torch
from torch import nn


def conv_bn_relu(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU())


class SmallCNN(nn.Module):
    """stem -> pool -> residual block (two back-to-back convs) -> pool -> head."""

    def __init__(self, channels: int = 16, classes: int = 10):
        super().__init__()
        self.stem = conv_bn_relu(3, channels)
        self.pool = nn.MaxPool2d(2)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(channels)
        self.widen = conv_bn_relu(channels, 2 * channels, stride=2)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(2 * channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.stem(x))
        y = self.bn(self.conv2(self.conv1(x)))
        x = torch.relu(x + y)
        x = self.gap(self.widen(x))
        return self.head(torch.flatten(x, 1))


def _randomize_norms(model: nn.Module) -> None:
    """Non-trivial running statistics, so batch norm is not the identity."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)


def cnn(batch: int = 16, size: int = 32, channels: int = 16):
    torch.manual_seed(0)
    model = SmallCNN(channels)
    _randomize_norms(model)
    return model.eval(), (torch.randn(batch, 3, size, size),)
