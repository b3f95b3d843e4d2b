"""The library models of `bench/real_suite.py` (torchvision, timm, transformers, LSTM/GRU),
as users bring them: their in-place ops (`ReLU(inplace=True)`, `out += identity`) are
functionalized at import, so none reaches the IR; no op of theirs runs through torch; each
compiles from its batch-1 inputs
and matches torch eager at batch 1 and at the suite's larger batch."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("torchvision")
pytest.importorskip("timm")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cuvil  # noqa: E402
from bench.real_suite import SUITE, build, first_tensor  # noqa: E402

pytestmark = pytest.mark.slow  # each model imports and compiles in 10-40 s on two cores
TOL = 1e-4

# an in-place overload: `aten.relu_.default`, `aten.add_.Tensor` (not `aten.__and__`)
IN_PLACE = re.compile(r"(^|\.)[a-z][a-z0-9_]*[a-z0-9]_(\.|$)")


def ops_and_targets(graph) -> list[str]:
    """Every node's op, and the aten overload of each `torch_op` fallback."""
    names = []
    for node in graph:
        names.append(node.op)
        if node.op == "torch_op":
            names.append(node.attrs["target"])
    return names


@pytest.fixture(scope="module", params=sorted(SUITE))
def suite_model(request):
    model, small, large = build(request.param)
    return request.param, model, small, large


def test_no_in_place_op_reaches_the_ir_and_nothing_falls_back(suite_model):
    name, model, small, _ = suite_model
    graph = cuvil.from_torch(model, small)
    in_place = sorted({n for n in ops_and_targets(graph) if IN_PLACE.search(n)})
    assert not in_place, f"{name}: in-place ops in the IR: {in_place}"
    assert not graph.import_report.fallbacks, f"{name}: {graph.import_report.fallbacks}"


def test_compiles_and_matches_eager_at_both_batches(suite_model):
    name, model, small, large = suite_model
    fast = cuvil.compile(model, small)
    for inputs in (small, large):
        with torch.no_grad():
            want = first_tensor(model(*inputs))
        got = first_tensor(fast(*inputs))
        assert got.shape == want.shape, name
        scale = max(1.0, want.abs().max().item())
        torch.testing.assert_close(got, want, rtol=TOL, atol=TOL * scale,
                                   msg=lambda m, n=name, b=inputs[0].shape[0]: f"{n} b{b}: {m}")
