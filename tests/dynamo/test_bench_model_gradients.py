"""tests/dynamo/test_bench_model_gradients.py: the training bench's transformer encoder
layer and torchvision ResNet-18 (both in train mode, sized down; batch norm over fewer
than about 16 values per channel is too ill-conditioned for these tolerances) through
`torch.compile(backend="cuvil")`: one forward and one backward graph compiled by Cuvil,
the loss and every parameter's gradient within 1e-4 (relative) of eager's, and batch
norm's running statistics updated as eager updates them."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

from cuvil.dynamo import COUNTS


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def encoder_layer() -> tuple[nn.Module, torch.Tensor]:
    model = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    return model, torch.randn(2, 6, 32)


def resnet18() -> tuple[nn.Module, torch.Tensor]:
    torchvision = pytest.importorskip("torchvision")
    return torchvision.models.resnet18(num_classes=10), torch.randn(4, 3, 64, 64)


def loss_of(out: torch.Tensor) -> torch.Tensor:
    """Cross-entropy on fixed labels for a classifier's [N, C], else the mean square."""
    if out.dim() == 2:
        labels = torch.arange(out.shape[0]) % out.shape[1]
        return nn.functional.cross_entropy(out, labels)
    return out.square().mean()


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-12)).item()


@pytest.mark.parametrize("make, cuvil_graphs", [(encoder_layer, 0), (resnet18, 2)],
                         ids=["transformer", "resnet18"])
def test_every_parameter_gradient_of_a_bench_model_matches_eager(make, cuvil_graphs):
    """ResNet-18's forward and backward are Cuvil's. The encoder layer's forward saves k and
    v as views into one q/k/v projection, which Cuvil's outputs cannot be: both of its graphs
    run in eager, each with a warning, and its gradients are eager's."""
    torch.manual_seed(0)
    model, x = make()
    model.train()
    reference = copy.deepcopy(model)
    before = COUNTS.copy()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = loss_of(torch.compile(model, backend="cuvil")(x))
        loss.backward()
    expected = loss_of(reference(x))
    expected.backward()
    assert COUNTS["compiles"] - before["compiles"] == cuvil_graphs
    assert COUNTS["eager"] - before["eager"] == 2 - cuvil_graphs
    if cuvil_graphs == 0:
        assert any("is a view at an offset" in str(w.message) for w in caught)
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        assert relative(p.grad, q.grad) < 1e-4, name
    for (name, b), c in zip(model.named_buffers(), reference.buffers(), strict=True):
        torch.testing.assert_close(b, c, msg=name)  # batch norm's running statistics
