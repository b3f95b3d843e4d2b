"""`kernels.mapped.binary_mapped` (an add, subtract or multiply of two operands read
through axis maps) against numpy on every rank, dim order and broadcast, one thread and
two, with and without constant factors; and lowering: an f32 binary op after transposes,
broadcasts or products with a scalar is the driver (nothing generated), with the operands
in the right order for a subtraction, while anything else stays generated."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import cuvil
from cuvil.targets.cpu.kernels.mapped import binary_mapped

OPS = {0: np.add, 1: np.subtract, 2: np.multiply}


def _operand(rng, shape, order, keep):
    """An array whose axes, in `order`, follow the output dims `keep` of `shape` (the
    others broadcast), and its axis map over `shape` padded to rank 4."""
    dims = [d for d in order if keep[d]]
    x = rng.standard_normal([shape[d] for d in dims] or [1]).astype(np.float32)
    view = x.transpose(np.argsort(dims)) if dims else x  # axes in output order
    view = view.reshape([shape[d] if keep[d] else 1 for d in range(len(shape))])
    amap = [-1] * (4 - len(shape)) + [dims.index(d) if keep[d] else -1
                                      for d in range(len(shape))]
    return x, np.array(amap, np.int64), view


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=4), st.data())
def test_matches_numpy_on_any_dim_order_and_broadcast(shape, data):
    rng = np.random.default_rng(len(shape))
    rank = len(shape)
    sides = []
    for _ in range(2):
        order = data.draw(st.permutations(range(rank)))
        keep = data.draw(st.lists(st.booleans(), min_size=rank, max_size=rank))
        sides.append(_operand(rng, shape, list(order), keep))
    (a, amap, av), (b, bmap, bv) = sides
    op, parts, split_from = data.draw(st.sampled_from(list(OPS))), \
        data.draw(st.integers(1, 2)), data.draw(st.sampled_from([1, 10**9]))
    scale = np.array(data.draw(st.sampled_from([(1, 1), (2.5, 1), (1, -0.5), (3, 0.25)])),
                     np.float32)
    out = np.full(shape, np.nan, np.float32)
    binary_mapped(a, amap, b, bmap, np.array([op, split_from], np.int64), scale, parts, out)
    expected = OPS[op](scale[0] * av, scale[1] * bv)
    np.testing.assert_allclose(out, np.broadcast_to(expected, shape), rtol=1e-6, atol=1e-6)


class Mapped(torch.nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.pos = torch.nn.Parameter(torch.randn(16, 8))

    def forward(self, x, y):
        if self.kind == "add transposed":  # ViT's patches + positions, a residual
            return x + y.transpose(1, 2)
        if self.kind == "transposed minus":  # the transposed operand first
            return y.transpose(1, 2) - x
        if self.kind == "minus transposed":  # loaded second, yet the first operand
            return x - y.transpose(1, 2)
        if self.kind == "times broadcast":
            return x * self.pos
        if self.kind == "axpy":
            return 2.5 * x + y.transpose(1, 2)
        if self.kind == "minus scaled":  # the factor on the second operand
            return x - y.transpose(1, 2) * 0.5
        if self.kind == "scaled twice":  # one array, two factors: not told apart
            return x * 2.0 - x
        return x + 1.0  # a scalar operand: generated


@pytest.mark.parametrize("kind, library", [("add transposed", True), ("transposed minus", True),
                                           ("minus transposed", True),
                                           ("times broadcast", True), ("axpy", True),
                                           ("minus scaled", True), ("scaled twice", False),
                                           ("plus one", False)])
def test_lowering_uses_the_driver_for_mapped_binary_ops(kind, library):
    torch.manual_seed(0)
    model = Mapped(kind).eval()
    x, y = torch.randn(3, 16, 8), torch.randn(3, 8, 16)
    compiled = cuvil.compile(model, (x, y), threads=2)
    assert ("binary_mapped" in compiled.source) == library
    assert ("@njit" not in compiled.source) == library
    for batch in (5, 1):
        x, y = torch.randn(batch, 16, 8), torch.randn(batch, 8, 16)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x, y), model(x, y))
