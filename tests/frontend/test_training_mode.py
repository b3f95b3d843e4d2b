"""Train mode is refused, never swapped: a model with a submodule in training mode whose
forward depends on it is a one-line error naming the submodule, also when the caches could
serve the compile; a model in training mode whose modules ignore it compiles as it is."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import cuvil


class ConvBn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


class ReadsTraining(nn.Module):
    def forward(self, x):
        return x * 2 if self.training else x


IMAGES = (torch.randn(2, 3, 8, 8),)
ROWS = (torch.randn(2, 8),)


@pytest.mark.parametrize("model, inputs, message", [
    (ConvBn(), IMAGES, r"^submodule 'bn' \(BatchNorm2d\) of ConvBn is in training mode"),
    (nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)), ROWS,
     r"^submodule '1' \(Dropout\) of Sequential is in training mode"),
    (nn.Sequential(nn.Linear(8, 8), ReadsTraining()), ROWS,
     r"^submodule '1' \(ReadsTraining\) of Sequential is in training mode"),
    (ReadsTraining(), ROWS, r"^the model \(ReadsTraining\) of ReadsTraining is in training"),
], ids=["conv-bn", "dropout", "reads-self-training", "root"])
def test_a_model_in_training_mode_is_refused(model, inputs, message):
    model.train()
    for make in (cuvil.compile, cuvil.optimize):
        with pytest.raises(cuvil.CuvilError, match=message) as caught:
            make(model, inputs)
        assert "call model.eval() to compile it for inference" in str(caught.value)
        assert "\n" not in str(caught.value)
    assert all(m.training for m in model.modules())  # never switched


def test_a_model_in_training_mode_that_ignores_it_compiles():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).train()
    compiled = cuvil.compile(model, ROWS, cache=False)
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    assert model.training


def test_a_warm_cache_refuses_it_too(tmp_path, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))
    torch.manual_seed(0)
    model = ConvBn().eval()
    cuvil.compile(model, IMAGES)
    assert cuvil.compile(model, IMAGES).report.program_cache.startswith("hit")
    model.train()
    with pytest.raises(cuvil.CuvilError, match="'bn' .* call model.eval()"):
        cuvil.compile(model, IMAGES)
