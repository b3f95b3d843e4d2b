"""The digits models (`cuvil.zoo.digits`): trained on scikit-learn's load_digits, the same
weights on every run, test accuracy well above chance and equal to a recount."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("sklearn")

from cuvil.zoo import digits  # noqa: E402


def test_split_is_fixed_and_stratified():
    x_tr, y_tr, x_te, y_te = digits.split()
    assert x_tr.shape == (1347, 1, 8, 8) and x_te.shape == (450, 1, 8, 8)
    assert float(x_tr.min()) == 0.0 and float(x_tr.max()) == 1.0
    assert torch.bincount(y_te).min() >= 43  # each class ~10% of the test set (174-183 of 1797)
    assert torch.equal(digits.split(images=False)[3], y_te)


def test_mlp_training_is_deterministic():
    a, b = digits.digits_mlp(epochs=5), digits.digits_mlp(epochs=5)
    for (name, p), q in zip(a.model.state_dict().items(), b.model.state_dict().values(),
                            strict=True):
        assert torch.equal(p, q), name
    assert a.accuracy == b.accuracy


def test_cnn_accuracy_matches_a_recount():
    d = digits.digits_cnn()
    assert d.accuracy > 0.95
    with torch.inference_mode():
        pred = d.model(d.x_test).argmax(dim=1)
    assert d.accuracy == pytest.approx(float((pred == d.y_test).float().mean()))
    assert d.calibration(4, 16)[3][0].shape == (16, 1, 8, 8)
    assert d.inputs(5)[0].shape == (5, 1, 8, 8)
