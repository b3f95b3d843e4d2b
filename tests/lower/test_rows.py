"""The row template (softmax, log_softmax, layer_norm, sum, mean, amax): last-dim rows,
reductions over middle dims (strided), keepdim, integer sums, and sums and means over every
dim but an adjacent block (batch norm's statistics), a symbolic batch among them."""

from __future__ import annotations

import pytest
import torch
from lowering_support import B, assert_matches_reference, t

from cuvil.ir import Graph


@pytest.fixture(scope="module")
def rows_graph(lower):
    g = Graph("rows")
    x = g.input("x", t(B, 6, 33))
    i = g.input("i", t(B, 6, dtype="i32"))
    w = g.const(torch.randn(33), "ln.w")
    b = g.const(torch.randn(33), "ln.b")
    outs = {
        "softmax": g.add("softmax", [x], {"dim": -1}),
        "softmax_mid": g.add("softmax", [x], {"dim": 1}),
        "log_softmax": g.add("log_softmax", [x], {"dim": -1}),
        "log_softmax_mid": g.add("log_softmax", [x], {"dim": 1}),
        "layer_norm": g.add("layer_norm", [x, w, b], {"normalized_shape": (33,), "eps": 1e-3}),
        "sum_last": g.add("sum", [x], {"dim": (-1,)}),
        "sum_mid": g.add("sum", [x], {"dim": (1,), "keepdim": True}),
        "mean_all": g.add("mean", [x]),
        "mean_two": g.add("mean", [x], {"dim": (1, 2), "keepdim": True}),
        "amax": g.add("amax", [x], {"dim": (-1,)}),
        "amax_mid": g.add("amax", [x], {"dim": (1,)}),
        "sum_int": g.add("sum", [i], {"dim": (1,)}),
    }
    g.set_outputs(outs)
    return g, lower(g)


@pytest.mark.parametrize("batch", [1, 5])
def test_row_kernels_match_reference(rows_graph, batch):
    g, compiled = rows_graph
    torch.manual_seed(batch)
    inputs = (torch.randn(batch, 6, 33) * 3, torch.randint(-9, 9, (batch, 6), dtype=torch.int32))
    assert_matches_reference(g, compiled, inputs)


def test_layer_norm_over_two_dims(lower):
    g = Graph("ln2")
    x = g.input("x", t(B, 4, 5))
    w, b = g.const(torch.randn(4, 5), "w"), g.const(torch.randn(4, 5), "b")
    g.set_outputs(g.add("layer_norm", [x, w, b], {"normalized_shape": (4, 5)}))
    assert_matches_reference(g, lower(g), (torch.randn(3, 4, 5),))


def test_sums_over_every_dim_but_a_block_are_row_kernels(lower):
    g = Graph("kept")
    x = g.input("x", t(B, 6, 5, 7))
    g.set_outputs({
        "channels": g.add("mean", [x], {"dim": (0, 2, 3), "keepdim": True}),
        "channels_sum": g.add("sum", [x], {"dim": (0, 2, 3)}),
        "middle": g.add("sum", [x], {"dim": (0, 3)}),
        "last": g.add("mean", [x], {"dim": (0, 1, 2)}),
    })
    compiled = lower(g)
    assert not compiled.report.fallbacks
    for batch in (1, 4):
        assert_matches_reference(g, compiled, (torch.randn(batch, 6, 5, 7) * 3 + 1,))
