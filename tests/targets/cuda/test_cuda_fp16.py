"""fp16 layers on `target="cuda"` (`cuvil.Quantize(activations="fp16")`, the rules of
`cuvil/targets/cuda/fp16.cvr`) under the simulator: extraction chooses f16 per layer by
cost, the GEMM and convolution kernels read f16 operands and accumulate in f32, the
results match eager within f16's rounding, and the digits models keep their accuracy.

Where a test needs extraction to choose f16, `bytes_bound` makes the device's launches
nearly free and its memory slow, as a large batch would: at the tiny shapes the simulator
can run, launches dominate and f16 (one cast kernel more, no faster arithmetic) rightly
loses, which `test_at_tiny_sizes_launches_decide_and_fp32_is_kept` checks."""

from __future__ import annotations

import pytest
import torch

import cuvil
from cuvil.lower.target import get_target
from cuvil.zoo import digits

FP16 = cuvil.Quantize(activations="fp16")


@pytest.fixture
def bytes_bound(monkeypatch):
    target = get_target("cuda")
    monkeypatch.setattr(target, "launch_us", 0.1)
    monkeypatch.setattr(target, "gbps", 1.0)


def _mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 8)).eval()
    return model, (torch.randn(4, 16),)


def _cnn():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                torch.nn.Linear(16, 3)).eval()
    return model, (torch.randn(1, 2, 4, 4),)


def _kernels(compiled) -> set[tuple[str, str]]:
    return {(s.template, s.op) for s in compiled.report.steps if s.kind == "kernel"}


def _close_to_eager(compiled, model, inputs):
    """Within f16's rounding of the operands: 2^-11 relative, over a few products."""
    with torch.no_grad():
        want = model(*inputs)
    got = compiled(*inputs)
    assert (got - want).abs().max() <= 1e-2 * want.abs().max(), (got, want)
    assert (got - want).abs().max() > 0, "f16 rounding shows"


def test_mlp_layers_run_as_f16_gemms(bytes_bound):
    model, inputs = _mlp()
    compiled = cuvil.compile(model, inputs, target="cuda", quantize=FP16, cache=False)
    assert not compiled.report.fallbacks
    chosen = {c.chosen for c in compiled.report.optimizer.precision}
    assert chosen == {"fp16"}, compiled.report.optimizer.precision
    assert {("gemm", "linear_relu_half_out"), ("gemm", "linear_half")} <= _kernels(compiled)
    assert "fp16 linear_relu_half" in str(compiled.report)
    _close_to_eager(compiled, model, inputs)


def test_cnn_convolutions_run_as_f16_kernels(bytes_bound):
    model, inputs = _cnn()
    compiled = cuvil.compile(model, inputs, target="cuda", quantize=FP16, cache=False)
    assert not compiled.report.fallbacks
    ops = {op for template, op in _kernels(compiled) if template == "conv"}
    assert ops and all("_half" in op for op in ops), _kernels(compiled)
    _close_to_eager(compiled, model, inputs)


def test_at_tiny_sizes_launches_decide_and_fp32_is_kept():
    """The device's own parameters: an f16 layer costs a cast kernel more and computes at
    the f32 rate, so at 4 rows every layer stays fp32, and the report says why."""
    model, inputs = _mlp()
    graph = cuvil.optimize(model, inputs, target="cuda", quantize=FP16)
    choices = graph.report.precision
    assert choices and all(c.chosen == "fp32" and c.low.cost > c.fp32.cost for c in choices)
    assert not any(n.op.endswith(("_half", "_half_out")) for n in graph)


def _accuracy_against_fp32(d, n=200):
    """fp16 on cuda against eager fp32 on the first `n` test images (the simulator runs
    each thread in Python: the whole split would take minutes). The mlp kernel family has
    no f16 form, so `fusion_mlp` is off and each layer is a GEMM that may be f16."""
    x, y = d.x_test[:n], d.y_test[:n]
    compiled = cuvil.compile(d.model, (x,), target="cuda", quantize=FP16,
                             disable=["fusion_mlp"], cache=False)
    with torch.no_grad():
        fp32 = (d.model(x).argmax(1) == y).float().mean().item()
    return compiled, digits.accuracy(compiled, x, y), fp32


def test_digits_mlp_keeps_its_accuracy_in_fp16(bytes_bound):
    pytest.importorskip("sklearn")
    compiled, accuracy, fp32 = _accuracy_against_fp32(digits.digits_mlp())
    assert {c.chosen for c in compiled.report.optimizer.precision} == {"fp16"}
    assert accuracy >= fp32 - 0.003, (accuracy, fp32)


@pytest.mark.heavy
def test_digits_cnn_keeps_its_accuracy_in_fp16(bytes_bound):
    """About five minutes under the simulator (its convolutions, a thread an output)."""
    pytest.importorskip("sklearn")
    compiled, accuracy, fp32 = _accuracy_against_fp32(digits.digits_cnn())
    assert "fp16" in {c.chosen for c in compiled.report.optimizer.precision}
    assert accuracy >= fp32 - 0.003, (accuracy, fp32)
