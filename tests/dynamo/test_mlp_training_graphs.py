"""tests/dynamo/test_mlp_training_graphs.py: the training bench's MLP (the zoo's
784-512-512-10, in train mode) through `torch.compile(backend="cuvil")`: every parameter's
gradient within 1e-4 (relative) of eager's at the bench's batch and at batch 1, and the
compiled graphs read each transposed weight and gradient in place (`matmul_lt`,
`linear_relu_rt`: no transpose is copied) and mask ReLU's gradient in the stores of the
product that computes it (`matmul_threshold_grad`)."""

from __future__ import annotations

import copy

import pytest
import torch
from program_support import compiled
from torch import nn

from cuvil import zoo


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-12)).item()


def train_step(model: nn.Module, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    loss = nn.functional.cross_entropy(model(x), labels)
    loss.backward()
    return loss


@pytest.mark.parametrize("batch", [32, 1])
def test_every_mlp_gradient_matches_eager(batch, programs):
    torch.manual_seed(0)
    model, _ = zoo.get("mlp", batch=batch)
    x = torch.randn(batch, 784)
    labels = torch.arange(batch) % 10
    model.train()
    reference = copy.deepcopy(model)
    loss = train_step(torch.compile(model, backend="cuvil"), x, labels)
    expected = train_step(reference, x, labels)
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        assert relative(p.grad, q.grad) < 1e-4, name
    assert len(programs) == 2  # the forward and the backward, both Cuvil's


def test_mlp_training_graphs_copy_no_transpose(programs):
    torch.manual_seed(0)
    model, (x,) = zoo.get("mlp", batch=32)
    train_step(torch.compile(model.train(), backend="cuvil"), x, torch.arange(32) % 10)
    forward, backward = ([s.op for s in compiled(p).report.steps] for p in programs)
    assert forward == ["linear_relu_rt", "linear_relu_rt", "linear_rt"]
    assert "transpose" not in backward
    assert backward.count("matmul_lt") == 3  # each weight's gradient, g^T @ x
    assert backward.count("matmul_threshold_grad") == 2  # each ReLU's gradient
