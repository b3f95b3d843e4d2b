"""tests/dynamo/test_batch_norm_training.py: a training batch norm through
`torch.compile(backend="cuvil")` runs on Cuvil's kernels (batch statistics as `mean` and
`var` row kernels, the weight gradient as `batch_norm_weight_grad`, the input gradient as
one elementwise chain), not in torch, and matches eager: the output, the running statistics
it updates, and the gradients of the input, weight and bias (float64 to 1e-12, float32 to
1e-5), for BatchNorm1d and 2d, with and without affine parameters and running statistics."""

from __future__ import annotations

import copy

import pytest
import torch
from program_support import compiled
from torch import nn


class NormRelu(nn.Module):
    def __init__(self, norm: nn.Module):
        super().__init__()
        self.norm = norm

    def forward(self, x):
        return torch.relu(self.norm(x)) * 2.0


CASES = {
    "2d": (lambda: nn.BatchNorm2d(6), (4, 6, 5, 7)),
    "2d-no-affine": (lambda: nn.BatchNorm2d(6, affine=False), (4, 6, 5, 7)),
    "2d-no-running": (lambda: nn.BatchNorm2d(6, track_running_stats=False), (4, 6, 5, 7)),
    "1d-rows": (lambda: nn.BatchNorm1d(6, momentum=0.3), (8, 6)),
    "1d-sequence": (lambda: nn.BatchNorm1d(6), (4, 6, 9)),
}


def step(model: nn.Module, x: torch.Tensor, dy: torch.Tensor) -> tuple:
    leaf = x.clone().requires_grad_()
    out = model(leaf)
    out.backward(dy)
    return out.detach(), leaf.grad


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("case", list(CASES))
def test_a_training_batch_norm_matches_eager_on_cuvil_kernels(case, dtype, programs):
    make, shape = CASES[case]
    torch.manual_seed(0)
    model = NormRelu(make()).to(dtype).train()
    reference = copy.deepcopy(model)
    compiled_model = torch.compile(model, backend="cuvil")
    tol = {"rtol": 1e-12, "atol": 1e-12} if dtype == torch.float64 else \
        {"rtol": 1e-5, "atol": 1e-5}
    for _ in range(2):  # the second step normalises with the first's running statistics
        x, dy = torch.randn(shape, dtype=dtype) * 3 + 1, torch.randn(shape, dtype=dtype)
        for got, want in zip(step(compiled_model, x, dy), step(reference, x, dy), strict=True):
            torch.testing.assert_close(got, want, **tol)
    for got, want in zip(model.state_dict().values(), reference.state_dict().values(),
                         strict=True):
        torch.testing.assert_close(got, want, **tol)  # running statistics, batches counted
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, **tol)
    ops = {s.op for p in programs for s in compiled(p).report.steps}
    assert not [op for op in ops if "torch_op" in op], ops
    assert {"mean", "var", "batch_norm_weight_grad"} <= ops


def test_an_eval_batch_norm_is_still_the_inference_form(programs):
    """In eval mode the running statistics normalise: no batch statistics are computed."""
    torch.manual_seed(0)
    model = NormRelu(nn.BatchNorm2d(6)).eval()
    model.norm.running_mean.uniform_(-1, 1)
    model.norm.running_var.uniform_(0.5, 2)
    x = torch.randn(4, 6, 5, 7)
    torch.testing.assert_close(torch.compile(model, backend="cuvil")(x), model(x))
    ops = {s.op for p in programs for s in compiled(p).report.steps}
    assert "var" not in ops and "mean" not in ops
