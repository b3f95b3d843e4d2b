"""Acceptance: every zoo model through `cuvil.compile` (import, optimize with the stock
rules, lower) matches torch eager within 1e-4 at two batch sizes from one compile."""

from __future__ import annotations

import pytest
import torch

import cuvil
from cuvil import zoo

SMALL = {"mlp": {"width": 64}, "mlp_gelu": {"width": 64}, "cnn": {"size": 16},
         "transformer": {"seq": 16, "d_model": 64, "ff": 128},
         "gpt2": {"seq": 16, "d_model": 64}, "mobilenet": {"size": 16},
         # as tests/zoo/test_zoo_blocks.py's, so one compile serves both
         "resnet": {"size": 8}, "vit": {"size": 16, "dim": 32, "heads": 2},
         "mixer": {"tokens": 16, "dim": 32}, "axpy": {"size": 1000}}


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_compiled_zoo_model_matches_eager(name, kernel_cache, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(kernel_cache))
    model, inputs = zoo.get(name, batch=2, **SMALL[name])
    compiled = cuvil.compile(model, inputs)
    for batch in (1, 5):  # every input drawn at this batch (axpy's two vectors alike)
        _, inputs = zoo.get(name, batch=batch, **SMALL[name])
        with torch.no_grad():
            expected = model(*inputs)
        got = compiled(*inputs)
        assert got.shape == expected.shape
        assert (got - expected).abs().max().item() <= 1e-4, name
