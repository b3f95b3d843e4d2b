"""The zoo's HuggingFace models (`hf_gpt2`, `hf_bert`): built from configs with random
weights, the same on every call, one tensor out; `cuvil.compile` of each matches torch
eager within 1e-4 at a batch and length other than the example's. Only HuggingFace's mask
and position code (arange, cumsum, index, gather) is left to torch."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("transformers")

import cuvil  # noqa: E402
from cuvil import zoo  # noqa: E402
from cuvil.zoo.huggingface import VOCAB  # noqa: E402

TINY = {"layers": 1, "dim": 64, "heads": 2}
MASK_OPS = {"arange", "cumsum", "diff", "index", "gather", "slice"}


@pytest.mark.parametrize("name", sorted(zoo.HUGGINGFACE))
def test_factories_are_deterministic_and_return_one_tensor(name):
    (m1, (ids,)), (m2, _) = zoo.get(name, **TINY), zoo.get(name, **TINY)
    assert not m1.training and ids.shape == (8, 64) and ids.dtype == torch.int64
    for (k, a), b in zip(m1.state_dict().items(), m2.state_dict().values(), strict=True):
        assert torch.equal(a, b), k
    with torch.no_grad():
        out = m1(ids)
    assert out.shape == (8, 64, VOCAB if name == "hf_gpt2" else 64)


@pytest.mark.slow  # a compile takes 5-20 s on two cores
@pytest.mark.parametrize("name", sorted(zoo.HUGGINGFACE))
def test_compiled_model_matches_eager_at_another_batch_and_length(name, kernel_cache,
                                                                   monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(kernel_cache))
    model, inputs = zoo.get(name, batch=2, seq=16, **TINY)
    compiled = cuvil.compile(model, inputs)
    left = {f.op.removeprefix("torch_op aten.").split(".")[0] for f in compiled.report.fallbacks}
    assert left <= MASK_OPS, left
    for batch, seq in ((2, 16), (3, 11)):
        _, (ids,) = zoo.get(name, batch=batch, seq=seq, **TINY)
        with torch.no_grad():
            want = model(ids)
        got = compiled(ids)
        assert got.shape == want.shape
        assert (got - want).abs().max().item() <= 1e-4, name
