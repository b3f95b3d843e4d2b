"""Moves inside an elementwise loop: a slice, transpose or select of a value the loop itself
computes is read at the moved index, a chain of moves composes, and a slice down to one
element of a dim reads that element. Each graph is compared with the reference executor;
the models the fuzzer found are compared with eager, results and the caller's tensors."""

from __future__ import annotations

import pytest
import torch
from lowering_support import B, assert_matches_reference, t, templates
from torch import nn

import cuvil
from cuvil.ir import Graph


def _slice(g, x, dim, start, end, step=1):
    return g.add("slice", [x], {"dim": dim, "start": start, "end": end, "step": step})


def test_a_slice_of_a_computed_value_is_one_loop_at_the_sliced_index(lower):
    g = Graph("tanh_slice")
    x = g.input("x", t(B, 2, 6))
    y = _slice(g, _slice(g, g.add("tanh", [x]), 0, 0, None), 2, 1, 6, 2)
    g.set_outputs(y)
    compiled = lower(g)
    assert templates(compiled) == ["elementwise"]
    for batch in (1, 4):
        assert_matches_reference(g, compiled, (torch.randn(batch, 2, 6),))


def test_chained_moves_of_a_computed_value_compose(lower):
    """relu, then transpose, slice, transpose and select: each read of `x` is at the
    composed index, and the relu is computed there."""
    g = Graph("relu_moves")
    x = g.input("x", t(B, 4, 5))
    r = g.add("relu", [g.add("mul", [x, g.scalar(2.0)])])
    m = g.add("transpose", [r], {"dim0": 1, "dim1": 2})                      # [B, 5, 4]
    m = _slice(g, m, 1, 1, 5, 2)                                              # [B, 2, 4]
    m = g.add("transpose", [m], {"dim0": 0, "dim1": 2})                      # [4, 2, B]
    m = g.add("select", [m], {"dim": 1, "index": -1})                        # [4, B]
    g.set_outputs(g.add("add", [m, g.scalar(1.0)]))
    compiled = lower(g)
    for batch in (1, 3):
        assert_matches_reference(g, compiled, (torch.randn(batch, 4, 5),))


def test_a_flip_reads_each_flipped_dim_backwards(lower):
    """A flip (of the symbolic batch too) inside a loop, composed with a slice, and alone
    (a numpy copy of the reversed view)."""
    g = Graph("flips")
    x = g.input("x", t(B, 4, 5))
    inside = g.add("mul", [g.add("flip", [x], {"dims": (0, -1)}), g.scalar(2.0)])
    sliced = g.add("relu", [g.add("flip", [_slice(g, g.add("tanh", [x]), 2, 1, 5, 2)],
                                  {"dims": (2, 1)})])
    g.set_outputs({"inside": inside, "sliced": sliced,
                   "alone": g.add("flip", [x], {"dims": (1,)})})
    compiled = lower(g)
    assert "copy" in templates(compiled) and "elementwise" in templates(compiled)
    for batch in (1, 3):
        xs = torch.randn(batch, 4, 5)
        assert_matches_reference(g, compiled, (xs,))
        got = compiled(xs)
        torch.testing.assert_close(got["inside"], 2 * xs.flip(0, 2))
        torch.testing.assert_close(got["sliced"], xs.tanh()[:, :, 1:5:2].flip(1, 2).relu())


def test_a_value_read_at_two_indices_is_computed_at_each(lower):
    g = Graph("two_views")
    x = g.input("x", t(B, 3, 3))
    e = g.add("exp", [x])
    g.set_outputs(g.add("sub", [e, g.add("transpose", [e], {"dim0": 1, "dim1": 2})]))
    compiled = lower(g)
    for batch in (1, 2):
        assert_matches_reference(g, compiled, (torch.randn(batch, 3, 3),))


def test_a_slice_to_one_element_reads_that_element(lower):
    g = Graph("narrow")
    x = g.input("x", t(B, 2, 8, 6))
    g.set_outputs(g.add("mul", [_slice(g, x, 1, 1, 2), g.scalar(0.5)]))
    compiled = lower(g)
    for batch in (1, 4):
        assert_matches_reference(g, compiled, (torch.randn(batch, 2, 8, 6),))


class TanhThenSlice(nn.Module):
    def forward(self, x):
        return torch.tanh(x)[:, :, 4:]


class WriteThroughTwoTransposes(nn.Module):
    def forward(self, x):
        y = x * 1.0
        y.transpose(0, 1).transpose(0, 2).mul_(0.5)
        return y


class ScaleOneChannel(nn.Module):
    def forward(self, x):
        y = x + 1.0
        y[:, :1].mul_(0.5)
        return y


@pytest.mark.parametrize("model, shape", [(TanhThenSlice(), (4, 2, 6)),
                                          (WriteThroughTwoTransposes(), (3, 3, 3)),
                                          (ScaleOneChannel(), (2, 2, 8, 6))],
                         ids=["tanh_then_slice", "write_through_two_transposes",
                              "scale_one_channel"])
def test_models_the_fuzzer_found_match_eager(model, shape, tmp_path, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    compiled = cuvil.compile(model, (torch.randn(shape),))
    for batch in (shape[0], 5):
        x = torch.randn(batch, *shape[1:])
        mine, theirs = x.clone(), x.clone()
        torch.testing.assert_close(compiled(theirs), model(mine))
        torch.testing.assert_close(theirs, mine)
