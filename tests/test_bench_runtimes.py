"""The ONNX runtimes the benchmarks compare with (`bench/runtimes.py`) compute what eager
computes, from one export, and OpenVINO in f32 (its CPU default may be bf16)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.runtimes import build_openvino, build_ort, exported  # noqa: E402
from cuvil import zoo  # noqa: E402

pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")


@pytest.mark.parametrize("build", [build_ort, build_openvino], ids=["ort", "openvino"])
def test_runtime_matches_eager_at_f32(build):
    model, inputs = zoo.get("mlp", batch=3)
    with torch.no_grad():
        want = model(*inputs)
    run, seconds = build(model, inputs, threads=1, onnx=exported(model, inputs))
    got = run()
    assert seconds > 0 and len(got) == 1 and got[0].dtype == torch.float32
    torch.testing.assert_close(got[0], want, rtol=1e-5, atol=1e-5)  # bf16 misses by ~1e-3
