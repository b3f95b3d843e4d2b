"""Small classifiers trained on real data, for accuracy checks of quantized compilation:
scikit-learn's `load_digits` (1,797 8x8 grey images of digits 0-9, shipped inside
scikit-learn, no download), a fixed train/test split, and a seeded trainer that takes a few
seconds on one thread and gives the same weights on every run.

    d = digits.digits_cnn()           # or digits_mlp(), digits_wide_mlp()
    d.model, d.accuracy               # the trained model (eval mode), fp32 test accuracy
    d.x_test, d.y_test                # [N, 1, 8, 8] (MLP: [N, 64]) float32 in [0, 1]
    d.calibration(batches=8)          # input tuples from the training set
    accuracy(model_or_callable, d.x_test, d.y_test)

Not in `zoo.MODELS`: training needs scikit-learn (the `test` extra), which the core
package does not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from cuvil.errors import CuvilError

TEST_FRACTION = 0.25


class DigitsCNN(nn.Module):
    """conv 3x3 (1 -> 16) - ReLU - conv 3x3 (16 -> 32) - ReLU - max-pool 2 - linear 512 -> 10."""

    def __init__(self, channels: int = 16, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, 2 * channels, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(2 * channels * 16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv2(torch.relu(self.conv1(x)))))
        return self.head(torch.flatten(x, 1))


class DigitsMLP(nn.Module):
    """64 - 128 - ReLU - 64 - ReLU - 10."""

    def __init__(self, hidden: tuple[int, int] = (128, 64), classes: int = 10):
        super().__init__()
        self.fc1 = nn.Linear(64, hidden[0])
        self.fc2 = nn.Linear(hidden[0], hidden[1])
        self.fc3 = nn.Linear(hidden[1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


@dataclass
class Digits:
    """A trained digits model, its split, and its fp32 test accuracy (a fraction)."""

    model: nn.Module
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    accuracy: float

    def calibration(self, batches: int = 8, size: int = 32) -> list[tuple[torch.Tensor]]:
        """`batches` input tuples of `size` training images (the first ones: fixed)."""
        return [(self.x_train[i * size:(i + 1) * size],) for i in range(batches)]

    def inputs(self, batch: int = 32) -> tuple[torch.Tensor]:
        """Example inputs: the first `batch` test images."""
        return (self.x_test[:batch],)


def split(images: bool = True, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """(x_train, y_train, x_test, y_test): pixels / 16 in [0, 1], as [N, 1, 8, 8] images or
    [N, 64] rows; a seeded, class-stratified 75/25 split."""
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError as err:
        raise CuvilError("cuvil.zoo.digits needs scikit-learn: pip install scikit-learn") from err
    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=TEST_FRACTION, random_state=seed,
                                              stratify=y)
    if images:
        x_tr, x_te = x_tr.reshape(-1, 1, 8, 8), x_te.reshape(-1, 1, 8, 8)
    return x_tr.contiguous(), y_tr, x_te.contiguous(), y_te


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int, seed: int = 0,
          lr: float = 3e-3, batch: int = 64) -> nn.Module:
    """Adam on shuffled mini-batches, seeded, on one thread (the same weights every run)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gen = torch.Generator().manual_seed(seed)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        model.train()
        for _ in range(epochs):
            order = torch.randperm(len(x), generator=gen)
            for i in range(0, len(x), batch):
                idx = order[i:i + batch]
                opt.zero_grad()
                nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
                opt.step()
    finally:
        torch.set_num_threads(threads)
    return model.eval()


def accuracy(model: Callable, x: torch.Tensor, y: torch.Tensor, batch: int = 256) -> float:
    """Fraction of `x` whose argmax output is `y` (a module or any compiled callable)."""
    correct = 0
    with torch.inference_mode():
        for i in range(0, len(x), batch):
            out = model(x[i:i + batch])
            out = out[0] if isinstance(out, tuple | list) else out
            correct += int((torch.as_tensor(out).argmax(dim=1) == y[i:i + batch]).sum())
    return correct / max(len(x), 1)


def _trained(model_fn: Callable[[], nn.Module], images: bool, epochs: int, seed: int) -> Digits:
    x_tr, y_tr, x_te, y_te = split(images, seed)
    torch.manual_seed(seed)
    model = train(model_fn(), x_tr, y_tr, epochs, seed)
    return Digits(model, x_tr, y_tr, x_te, y_te, accuracy(model, x_te, y_te))


def digits_cnn(epochs: int = 20, seed: int = 0) -> Digits:
    """The CNN trained on 8x8 digit images ([N, 1, 8, 8] inputs)."""
    return _trained(DigitsCNN, True, epochs, seed)


def digits_mlp(epochs: int = 60, seed: int = 0) -> Digits:
    """The MLP trained on flattened digits ([N, 64] inputs)."""
    return _trained(DigitsMLP, False, epochs, seed)


def digits_wide_mlp(epochs: int = 4, seed: int = 0) -> Digits:
    """An MLP 64 - 1024 - ReLU - 1024 - ReLU - 10 trained on flattened digits: its 1024 x
    1024 layer dominates (GEMM-bound at batches of a few hundred), the case the int8
    latency goal is about; a few epochs reach the small MLP's accuracy."""
    return _trained(lambda: DigitsMLP(hidden=(1024, 1024)), False, epochs, seed)
