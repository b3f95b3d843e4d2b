"""transformers' GPT-2 and LLaMA of `bench/real_suite.py` build their attention masks with
`cumsum`, `diff` and advanced indexing (`aten.index.Tensor`, the packed-sequence check of
`masking_utils`): compiled with a dynamic batch, none of them is left to torch, and the
models match eager at batch 1 and at the suite's larger batch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cuvil  # noqa: E402
from bench.real_suite import build, first_tensor  # noqa: E402

pytestmark = pytest.mark.slow  # each model imports and compiles in 10-40 s on two cores
MASK_OPS = ("cumsum", "diff", "index")
TOL = 1e-4


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_mask_ops_are_native_and_the_model_matches_eager(name):
    model, small, large = build(name)
    fast = cuvil.compile(model, small)
    left = [f.op for f in fast.report.fallbacks]
    assert not [op for op in left if any(f"aten.{m}." in op for m in MASK_OPS)], left
    assert {n.op for n in fast.graph} >= set(MASK_OPS)
    for inputs in (small, large):
        with torch.no_grad():
            want = first_tensor(model(*inputs))
        got = first_tensor(fast(*inputs))
        assert got.shape == want.shape
        scale = max(1.0, want.abs().max().item())
        torch.testing.assert_close(got, want, rtol=TOL, atol=TOL * scale)
