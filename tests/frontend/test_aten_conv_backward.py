"""A convolution's backward: the input's gradient of a stride-1 2-d convolution at least
MIN_WIDTH pixels wide, of MIN_CHANNELS channels or more, is a Cuvil convolution of the
output's gradient with the flipped, swapped weight, the weight's and bias's gradients one
torch call without it; any other convolution's backward is one torch call. Every gradient
equals torch's."""

from __future__ import annotations

import pytest
import torch

import cuvil
from cuvil.frontend.aten_conv_backward import MIN_CHANNELS, MIN_WIDTH


class ConvBackward(torch.nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride: int, padding: int,
                 mask: tuple[bool, ...]):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(cout, cin, k, k) / (cin * k * k) ** 0.5)
        self.stride, self.padding, self.mask = stride, padding, list(mask)

    def forward(self, dy, x):
        grads = torch.ops.aten.convolution_backward(
            dy, x, self.weight, [self.weight.shape[0]], [self.stride] * 2, [self.padding] * 2,
            [1, 1], False, [0, 0], 1, self.mask)
        return tuple(g for g in grads if g is not None)


def _case(cin, cout, k, stride, padding, width, mask):
    torch.manual_seed(cin + k + width)
    model = ConvBackward(cin, cout, k, stride, padding, mask).eval()
    x = torch.randn(2, cin, width, width)
    with torch.no_grad():
        out = torch.nn.functional.conv2d(x, model.weight, None, stride, padding)
    return model, (torch.randn_like(out), x)


@pytest.mark.parametrize("k, padding, mask", [
    (3, 1, (True, True, True)), (3, 0, (True, True, False)), (5, 2, (True, False, False)),
    (1, 0, (True, True, True))], ids=["3x3", "3x3-valid", "5x5-input-only", "1x1"])
def test_the_input_gradient_of_a_stride_1_convolution_is_a_convolution(k, padding, mask):
    model, inputs = _case(MIN_CHANNELS, 6, k, 1, padding, MIN_WIDTH, mask)
    graph = cuvil.from_torch(model, inputs)
    assert {"conv2d", "flip"} <= set(graph.ops())
    torch_calls = [n for n in graph if n.op == "torch_op"]
    assert len(torch_calls) == sum(mask[1:])  # the weight's and bias's gradients
    assert all(n.attrs["args"][-1] == (False, *mask[1:]) for n in torch_calls)
    with torch.no_grad():
        want = model(*inputs)
        got = cuvil.compile(model, inputs)(*inputs)
    assert len(got) == len(want) == sum(mask)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride, width, channels", [
    (2, MIN_WIDTH, MIN_CHANNELS), (1, MIN_WIDTH // 2, MIN_CHANNELS),
    (1, MIN_WIDTH, MIN_CHANNELS // 2)], ids=["strided", "narrow", "few-channels"])
def test_other_convolutions_backward_run_in_torch_as_one_call(stride, width, channels):
    model, inputs = _case(channels, 4, 3, stride, 1, width, (True, True, True))
    graph = cuvil.from_torch(model, inputs)
    assert "conv2d" not in graph.ops() and "torch_op" in graph.ops()
    with torch.no_grad():
        want = model(*inputs)
        got = cuvil.compile(model, inputs)(*inputs)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
