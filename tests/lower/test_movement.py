"""Whole-array moves lowered to numpy (nothing to compile): cat and embedding."""

from __future__ import annotations

import pytest
import torch
from lowering_support import B, assert_matches_reference, t, templates

from cuvil.ir import Graph


@pytest.fixture(scope="module")
def moves(lower):
    g = Graph("moves")
    x = g.input("x", t(B, 3))
    y = g.input("y", t(B, 5))
    idx = g.input("i", t(B, 4, dtype="i64"))
    table = g.const(torch.randn(10, 6), "emb")
    g.set_outputs({"cat": g.add("cat", [x, y, x], {"dim": 1}),
                   "rows": g.add("cat", [x, x], {"dim": 0}),
                   "emb": g.add("embedding", [table, idx])})
    return g, lower(g)


@pytest.mark.parametrize("batch", [1, 3])
def test_cat_and_embedding(moves, batch):
    g, compiled = moves
    assert set(templates(compiled)) == {"concat", "gather"}
    assert not any(k.jit for k in compiled.report.kernels)
    torch.manual_seed(batch)
    inputs = (torch.randn(batch, 3), torch.randn(batch, 5), torch.randint(0, 10, (batch, 4)))
    assert_matches_reference(g, compiled, inputs)


def test_embedding_index_out_of_range_raises(moves):
    g, compiled = moves
    with pytest.raises(IndexError, match="embedding"):
        compiled(torch.randn(1, 3), torch.randn(1, 5), torch.tensor([[0, 1, 2, 10]]))


def test_moves_through_views_are_one_copy_each(lower):
    """transpose -> squeeze -> select x3 -> view -> transpose, as attention splits qkv:
    every chain is one composed numpy view and one copy, and nothing is copied twice."""
    g = Graph("qkv_split")
    x = g.input("x", t(B, 5, 3, 8))
    h = g.add("squeeze", [g.add("transpose", [g.add("unsqueeze", [x], {"dim": 0})],
                                {"dim0": 0, "dim1": -2})], {"dim": (-2,)})  # [3, B, 5, 8]
    outs = []
    for i in range(3):
        s = g.add("view", [g.add("select", [h], {"dim": 0, "index": i})], {"shape": (B, 5, 2, 4)})
        outs.append(g.add("transpose", [s], {"dim0": 1, "dim1": 2}))
    g.set_outputs(tuple(outs))
    compiled = lower(g)
    assert templates(compiled) == ["copy"] * 3
    assert all(len(k.nodes) == 5 for k in compiled.report.kernels)
    for batch in (1, 3):
        assert_matches_reference(g, compiled, (torch.randn(batch, 5, 3, 8),))


def test_zero_d_values_stay_zero_d(lower):
    """A 0-d constant index picks one row (not a [1, n] block); a 0-d transpose moves
    nothing."""
    g = Graph("zero_d")
    w, s = g.input("w", t(B, 5)), g.input("s", t())
    idx = g.const(torch.tensor(3), "idx")
    g.set_outputs({"row": g.add("embedding", [w, idx]),
                   "same": g.add("transpose", [s], {"dim0": 0, "dim1": -1})})
    assert_matches_reference(g, lower(g), (torch.randn(6, 5), torch.tensor(2.0)))
