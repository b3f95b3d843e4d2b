"""transformers' GPT-2 and LLaMA of `bench/real_suite.py` build their attention masks with
`cumsum`, `diff` and advanced indexing (`aten.index.Tensor`, the packed-sequence check of
`masking_utils`): compiled with a dynamic batch, none of them is left to torch, and the
models match eager at batch 1 and at the suite's larger batch. BERT (its position ids cut
from a buffer, token type ids gathered), T5's and Whisper's encoders (`conv1d`) compile with
no torch fallback at all."""

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
    matches_eager(model, fast, small, large)


@pytest.mark.parametrize("name", ["bert", "t5_encoder", "whisper_encoder"])
def test_encoders_compile_with_no_fallback_and_match_eager(name):
    model, small, large = build(name)
    fast = cuvil.compile(model, small)
    assert [f.op for f in fast.report.fallbacks] == []
    matches_eager(model, fast, small, large)


def matches_eager(model, fast, small, large):
    for inputs in (small, large):
        with torch.no_grad():
            want = first_tensor(model(*inputs))
        got = first_tensor(fast(*inputs))
        assert got.shape == want.shape
        scale = max(1.0, want.abs().max().item())
        torch.testing.assert_close(got, want, rtol=TOL, atol=TOL * scale)
