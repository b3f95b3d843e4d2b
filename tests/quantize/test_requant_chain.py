"""Requantization between int8 layers, chosen by cost (`rules/quantize/requant.cvr`): with
the stock costs the digits MLP's int8 layers pass u8 from one to the next (each hidden
layer requantizes in its epilogue), and a layer whose f32 output is read elsewhere keeps
it. Results equal the reference executor's and the fp32 accuracy."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import cuvil
from cuvil.zoo import digits

pytest.importorskip("sklearn")


def kernel_steps(fn) -> list[tuple[str, str]]:
    return [(s.template, str(fn.graph[s.value].type.dtype)) for s in fn.report.steps
            if s.template in ("qgemm", "qconv")]


@pytest.fixture(scope="module")
def mlp():
    d = digits.digits_mlp()
    q = cuvil.Quantize(calibration=d.calibration(batches=8))
    return d, cuvil.compile(d.model, (d.x_test[:128],), quantize=q)


def test_the_digits_mlp_passes_u8_between_its_int8_layers(mlp):
    d, fn = mlp
    assert kernel_steps(fn) == [("qgemm", "u8"), ("qgemm", "u8"), ("qgemm", "f32")]
    fired = fn.report.optimizer.rules
    assert {"linear_relu_requant", "linear_relu_u8_requant"} <= set(fired)
    x = d.x_test[:64]
    torch.testing.assert_close(fn(x), cuvil.run(fn.graph, x), rtol=1e-4, atol=1e-4)
    assert digits.accuracy(fn, d.x_test, d.y_test) >= d.accuracy - 0.003


def test_the_report_lists_every_int8_layer_of_the_chain(mlp):
    _, fn = mlp
    choices = fn.report.optimizer.precision
    steps = [s for s in fn.report.steps if s.template == "qgemm"]
    assert len(choices) == len(steps) == 3  # the requantized hidden layers included
    assert all(c.chosen == "int8" and c.low.rule for c in choices)
    assert len({c.node for c in choices}) == 3


class Shared(nn.Module):
    """Two linear layers; the hidden ReLU is also returned, so it is needed in f32."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(256, 256), nn.Linear(256, 256)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        return h, self.fc2(h)


def test_a_layer_whose_f32_output_is_read_elsewhere_keeps_it():
    torch.manual_seed(0)
    model, x = Shared().eval(), torch.randn(256, 256)
    q = cuvil.Quantize(calibration=[(x,), (x * 0.5,)])
    fn = cuvil.compile(model, (x,), quantize=q)
    assert kernel_steps(fn) == [("qgemm", "f32"), ("qgemm", "f32")]
    for got, ref in zip(fn(x), cuvil.run(fn.graph, x), strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
