"""`cuvil.Quantize(activations="fp16")`: no calibration batches, every floating value the
model computes marked `half_ok` (constants are not: the rules cast them, and the cast
folds), and a one-line refusal where no target of the compile has f16 kernels."""

from __future__ import annotations

import pytest
import torch

import cuvil
from cuvil.frontend import from_torch
from cuvil.ir.types import DType
from cuvil.quantize.config import NO_FP16


def _mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 4)).eval()
    return model, (torch.randn(3, 8),)


def test_fp16_needs_no_calibration_and_marks_the_computed_floats():
    q = cuvil.Quantize(activations="fp16")
    assert q.calibration == () and q.half
    graph = from_torch(*_mlp())
    marked = q.annotate(graph).facts
    computed = {n.name for n in graph
                if n.op not in ("const", "scalar") and n.type.dtype is DType.f32}
    assert set(marked) == computed and computed
    assert all(f == {"half_ok": True} for f in marked.values())


def test_fp16_on_the_cpu_target_is_a_one_line_error():
    model, inputs = _mlp()
    with pytest.raises(cuvil.CuvilError) as err:
        cuvil.compile(model, inputs, quantize=cuvil.Quantize(activations="fp16"))
    assert str(err.value) == NO_FP16
    assert "\n" not in str(err.value) and "no float16 type on the CPU" in str(err.value)
