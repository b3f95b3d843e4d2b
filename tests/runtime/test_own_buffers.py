"""The runtime writes only buffers it owns: a torch fallback whose op writes its inputs
(a custom op that says it writes nothing) leaves the caller's tensor and the model's weight
as they were, through either way a fallback is made; and `CUVIL_CHECK_WRITES` catches a
runtime that hands the op the caller's tensors, while letting the model's own in-place
writes of an input through."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

import cuvil
from cuvil import aligned
from cuvil.errors import CuvilError
from cuvil.ir.torch_template import known_pure
from cuvil.runtime import calling
from cuvil.runtime import compiled as compiled_module
from cuvil.runtime.compiled import CompiledGraph
from cuvil.runtime.write_check import check_writes


@torch.library.custom_op("cuvil_test::scribble", mutates_args=())
def scribble(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x * w, then adds 1 to both: writes its inputs, though its schema says it does not."""
    out = x * w
    x.add_(1.0)
    w.add_(1.0)
    return out


@scribble.register_fake
def _(x, w):
    return torch.empty_like(x)


class Scribbler(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        return torch.ops.cuvil_test.scribble(x, self.w) * 2.0


class ScribbledWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.v = nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        return x + torch.ops.cuvil_test.scribble(self.w, self.v)  # computed at import


class ReluInput(nn.Module):
    def forward(self, x):
        return x.relu_() * 2


@pytest.fixture(autouse=True)
def cache_dir(kernel_cache, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(kernel_cache))


@pytest.fixture(scope="module")
def scribbler(kernel_cache):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CUVIL_CACHE_DIR", str(kernel_cache))
        torch.manual_seed(0)
        model = Scribbler().eval()
        return model, cuvil.compile(model, (torch.randn(2, 4, 4),))


def eager(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """What eager returns for `x`, on copies (eager's op writes the model and the input)."""
    with torch.no_grad():
        return copy.deepcopy(model)(x.clone())


def remake(compiled: CompiledGraph, spec=None) -> CompiledGraph:
    """The same compiled program as a new compiled graph, with new plans and fallbacks and
    copies of the constants (a broken runtime may write them)."""
    consts = [aligned_copy(c) for c in compiled._consts]
    return CompiledGraph(spec or compiled._spec, compiled._entry, consts,
                         compiled.report, compiled.threads, graph=compiled.graph)


def aligned_copy(array: np.ndarray) -> np.ndarray:
    out = aligned.empty(array.shape, array.dtype)
    out[...] = array
    return out


def test_the_custom_op_runs_as_a_torch_fallback(scribbler):
    _, compiled = scribbler
    assert any("cuvil_test.scribble" in f.op for f in compiled.report.fallbacks)


@pytest.mark.parametrize("made", ["plain call", "from the graph"])
def test_a_fallback_that_writes_its_inputs_changes_no_caller_tensor(scribbler, made):
    model, compiled = scribbler
    if made == "from the graph":  # `fallback.make_fallback`, as for a fallback with no plain call
        compiled = remake(compiled, dataclasses.replace(compiled._spec, torch_calls=()))
    weight, consts = model.w.detach().clone(), [c.copy() for c in compiled._consts]
    for batch in (3, 3, 1):  # the second call takes the bound path
        x = torch.randn(batch, 4, 4)
        before = x.clone()
        torch.testing.assert_close(compiled(x), eager(model, x))
        assert torch.equal(x, before)
    assert torch.equal(model.w.detach(), weight)
    assert all(np.array_equal(c, c0) for c, c0 in zip(compiled._consts, consts, strict=True))


def test_the_write_check_catches_a_fallback_handed_the_callers_tensors(scribbler, monkeypatch):
    model, compiled = scribbler
    checked = remake(compiled)
    check_writes(checked)
    x = torch.randn(3, 4, 4)
    torch.testing.assert_close(checked(x), eager(model, x))  # a sound runtime passes
    broken = remake(compiled)
    monkeypatch.setattr(calling, "private", lambda tensors, pure: tensors)  # no copies
    before, weight = x.clone(), model.w.detach().clone()
    broken(x)
    assert not torch.equal(x, before)  # the broken runtime does write the caller's tensor
    assert torch.equal(model.w.detach(), weight)  # (its constants are copies)
    x = before.clone()
    monkeypatch.setattr(compiled_module, "CHECK_WRITES", True)  # as CUVIL_CHECK_WRITES=1
    with pytest.raises(CuvilError, match=r"wrote input 'x', constant \d+ \(float32\[4, 4\]\)"):
        remake(compiled)(x)


def test_an_op_computed_at_import_changes_no_weight():
    torch.manual_seed(0)
    model = ScribbledWeight().eval()
    original, x = copy.deepcopy(model), torch.randn(3, 4, 4)
    compiled = cuvil.compile(model, (x,))
    for mine, theirs in zip(model.parameters(), original.parameters(), strict=True):
        assert torch.equal(mine, theirs)
    torch.testing.assert_close(compiled(x), eager(original, x))


def test_the_write_check_lets_the_models_own_input_writes_through(monkeypatch):
    model, x = ReluInput(), torch.randn(3, 8)
    compiled = cuvil.compile(model, (x.clone(),))
    monkeypatch.setattr(compiled_module, "CHECK_WRITES", True)
    checked = CompiledGraph(compiled._spec, compiled._entry, compiled._consts,
                            compiled.report, compiled.threads)
    mine, theirs = x.clone(), x.clone()
    torch.testing.assert_close(checked(mine), model(theirs))
    torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize(("target", "pure"), [
    ("aten.cumsum.default", True), ("aten.add_.Tensor", False),
    ("cuvil_test.scribble.default", False), ("aten.no_such_op.default", False)])
def test_only_torchs_own_ops_that_write_no_argument_are_known_pure(target, pure):
    assert known_pure(target) is pure
