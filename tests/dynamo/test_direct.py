"""tests/dynamo/test_direct.py: a training graph AOTAutograd's runtime would add nothing to
is called as one autograd.Function of its compiled forward and backward (`direct.py`),
with eager's gradients, eager's saved-tensor checks and eager's `requires_grad` on each
output; a graph that aliases its inputs keeps AOTAutograd's runtime and eager's results."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from cuvil.dynamo import COUNTS


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))


def _grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


def test_a_plain_training_graph_is_called_directly_with_eagers_gradients():
    model, x = _mlp(), torch.randn(4, 16)
    reference = copy.deepcopy(model)
    before = COUNTS["direct"]
    out = torch.compile(model, backend="cuvil")(x)
    assert COUNTS["direct"] == before + 1
    out.sum().backward()  # the tangent is expanded, stride 0
    expected = reference(x)
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    for got, want in zip(_grads(model), _grads(reference), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


class _TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x, labels):
        y = self.linear(x)
        return y, (labels * 2.0).exp(), y.argmax(dim=1)  # no gradient reaches 2nd, 3rd


def test_outputs_without_a_gradient_do_not_require_one_as_in_eager():
    torch.manual_seed(0)
    model, x, labels = _TwoHeads(), torch.randn(4, 8), torch.randn(4)
    reference = copy.deepcopy(model)
    before = COUNTS["direct"]
    got = torch.compile(model, backend="cuvil")(x, labels)
    want = reference(x, labels)
    assert COUNTS["direct"] == before + 1
    assert [t.requires_grad for t in got] == [t.requires_grad for t in want] == \
        [True, False, False]
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)
    (got[0] ** 2).sum().backward()
    (want[0] ** 2).sum().backward()
    for a, b in zip(_grads(model), _grads(reference), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_saved_input_changed_before_backward_is_refused_as_in_eager():
    class Scale(nn.Module):
        def forward(self, x, w):
            return (x * w).tanh()

    x, w = torch.randn(4, 8), torch.randn(4, 8, requires_grad=True)
    out = torch.compile(Scale(), backend="cuvil")(x, w)
    x.add_(1.0)  # x is saved for w's gradient
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


class _ViewOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        return x.view(-1), self.linear(x)  # the first output is a view of the input


def test_a_graph_returning_a_view_of_its_input_keeps_aot_autograds_runtime():
    torch.manual_seed(0)
    model, x = _ViewOut(), torch.randn(4, 8, requires_grad=True)
    reference, x_ref = copy.deepcopy(model), x.detach().clone().requires_grad_()
    before = COUNTS["direct"]
    view, y = torch.compile(model, backend="cuvil")(x)
    view_ref, y_ref = reference(x_ref)
    assert COUNTS["direct"] == before
    assert view._base is x  # an alias of the input, as in eager
    (view.sum() + y.square().sum()).backward()
    (view_ref.sum() + y_ref.square().sum()).backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    for a, b in zip(_grads(model), _grads(reference), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_two_forwards_then_one_backward_accumulate_eagers_gradients():
    """Each call's saved tensors are its own: a second forward before the first backward
    (gradient accumulation over micro-batches) leaves the first's intact."""
    model, x1, x2 = _mlp(), torch.randn(4, 16), torch.randn(4, 16)
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="cuvil")
    (compiled(x1).square().sum() + compiled(x2).square().sum()).backward()
    (reference(x1).square().sum() + reference(x2).square().sum()).backward()
    for got, want in zip(_grads(model), _grads(reference), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_the_backward_is_compiled_at_the_first_backward_only():
    """A forward run with gradients on but never differentiated (evaluation without
    `torch.no_grad()`) compiles no backward graph."""
    model, x = _mlp(), torch.randn(4, 16)
    compiled = torch.compile(model, backend="cuvil")
    before = COUNTS.copy()
    out = compiled(x)
    assert COUNTS["direct"] - before["direct"] == 1
    assert COUNTS["compiles"] - before["compiles"] == 1  # the forward
    out.sum().backward()
    compiled(x).sum().backward()
    assert COUNTS["compiles"] - before["compiles"] == 2  # and the backward, once
