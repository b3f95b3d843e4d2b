"""tests/dynamo/test_digits_training.py: ten Adam steps of the digits MLP and CNN
(`cuvil.zoo.digits`, scikit-learn's 8x8 digits) through `torch.compile(backend="cuvil")`
follow eager's loss curve within 1e-4 per step and reach the same test accuracy."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from cuvil.dynamo import COUNTS

pytest.importorskip("sklearn")

from cuvil.zoo import digits  # noqa: E402

STEPS, BATCH = 10, 64


def train(step_fn, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[float]:
    """The loss of each of `STEPS` Adam steps on consecutive batches of (x, y)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    curve = []
    for step in range(STEPS):
        batch = slice(step * BATCH, (step + 1) * BATCH)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(step_fn(x[batch]), y[batch])
        loss.backward()
        optimizer.step()
        curve.append(loss.item())
    return curve


@pytest.mark.parametrize("make, images", [(digits.DigitsMLP, False), (digits.DigitsCNN, True)],
                         ids=["mlp", "cnn"])
def test_ten_adam_steps_follow_eager_and_reach_its_accuracy(make, images):
    x_train, y_train, x_test, y_test = digits.split(images)
    torch.manual_seed(0)
    model = make().train()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="cuvil")
    before = COUNTS.copy()
    got = train(compiled, model, x_train, y_train)
    want = train(reference, reference, x_train, y_train)
    assert COUNTS["compiles"] - before["compiles"] == 2  # one forward, one backward
    assert COUNTS["eager"] == before["eager"]
    assert want[-1] < want[0]  # it learns: the curve is no flat line
    for step, (a, b) in enumerate(zip(got, want, strict=True)):
        assert abs(a - b) <= 1e-4, (step, a, b)
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        assert ((p - q).norm() / q.norm()).item() < 1e-4, name
    accuracy = digits.accuracy(compiled, x_test, y_test)
    assert accuracy == digits.accuracy(reference, x_test, y_test)
    assert accuracy > 0.5  # ten steps learn well past chance (0.1)
