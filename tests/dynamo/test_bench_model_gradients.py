"""tests/dynamo/test_bench_model_gradients.py: the training bench's transformer encoder
layer and torchvision ResNet-18 (both in train mode, sized down; batch norm over fewer
than about 16 values per channel is too ill-conditioned for these tolerances) through
`torch.compile(backend="cuvil")`: the forward and the backward graph compiled by Cuvil,
the loss and every parameter's gradient within 1e-4 (relative) of eager's, and batch
norm's running statistics updated as eager updates them.

ResNet-18 is compared in float64. Its convolutions are Cuvil's, which round differently
from torch's; in float32 one ReLU input of its ~500,000 fell within rounding of zero (8e-7
in Cuvil, 0 in eager, both within float32's error of the float64 value), took the
other side of the kink, and the gradient it let through reached every earlier layer
(1.8% off in each). In float64 that needs a value within ~1e-15 of zero."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

from cuvil.dynamo import COUNTS


def encoder_layer() -> tuple[nn.Module, torch.Tensor]:
    model = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    return model, torch.randn(2, 6, 32)


def resnet18() -> tuple[nn.Module, torch.Tensor]:
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.resnet18(num_classes=10).double()
    return model, torch.randn(4, 3, 64, 64, dtype=torch.float64)


def loss_of(out: torch.Tensor) -> torch.Tensor:
    """Cross-entropy on fixed labels for a classifier's [N, C], else the mean squared error
    against a fixed random target, as the training bench's (the mean square of a layer
    norm's output is constant: its gradients would be rounding noise)."""
    if out.dim() == 2:
        labels = torch.arange(out.shape[0]) % out.shape[1]
        return nn.functional.cross_entropy(out, labels)
    target = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    return nn.functional.mse_loss(out, target)


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-12)).item()


@pytest.mark.parametrize("make", [encoder_layer, resnet18], ids=["transformer", "resnet18"])
def test_every_parameter_gradient_of_a_bench_model_matches_eager(make):
    """Both graphs of each model are Cuvil's (the encoder layer's forward saves q, k and v
    as views into one projection, at offsets into it, for the backward)."""
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
    assert COUNTS["compiles"] - before["compiles"] == 2
    assert COUNTS["eager"] == before["eager"], [str(w.message) for w in caught]
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        assert relative(p.grad, q.grad) < 1e-4, name
    for (name, b), c in zip(model.named_buffers(), reference.buffers(), strict=True):
        torch.testing.assert_close(b, c, msg=name)  # batch norm's running statistics


class _Bert(nn.Module):
    """A two-layer transformers BERT (dropout off) on token ids: its last hidden state."""

    def __init__(self):
        super().__init__()
        transformers = pytest.importorskip("transformers")
        config = transformers.BertConfig(
            vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        self.bert = transformers.BertModel(config)

    def forward(self, ids):
        return self.bert(ids).last_hidden_state


def test_a_transformers_bert_trains_with_eagers_gradients():
    """Layer norm's statistics and gradient are Cuvil's, the training graphs are called
    directly (`direct.py`). The key projections' biases have a gradient of 0 in exact
    arithmetic (softmax ignores a constant added to a row's logits): errors are relative to
    1e-6 of the largest gradient where a gradient is less."""
    torch.manual_seed(0)
    model, ids = _Bert().train(), torch.randint(0, 100, (2, 16))
    reference = copy.deepcopy(model)
    before = COUNTS.copy()
    loss = loss_of(torch.compile(model, backend="cuvil")(ids))
    loss.backward()
    expected = loss_of(reference(ids))
    expected.backward()
    assert COUNTS["direct"] - before["direct"] == 1 and COUNTS["eager"] == before["eager"]
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    floor = 1e-6 * max(q.grad.norm().item() for q in reference.parameters()
                       if q.grad is not None)
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        if q.grad is None:
            assert p.grad is None, name
            continue
        error = ((p.grad - q.grad).norm() / max(q.grad.norm().item(), floor)).item()
        assert error < 1e-4, (name, error)
