"""The GEMM + epilogue template: BLAS products with fused bias/activation/residual, the
few-rows dot-product path, batched products, and what falls back (integer matmul)."""

from __future__ import annotations

import pytest
import torch
from lowering_support import B, assert_matches_reference, call_templates, t, templates

from cuvil.ir import Graph
from cuvil.library import load

FUSED = "op linear_gelu_residual(x, w, b, r) = add(gelu(add(matmul(x, w), b)), r) kernel gemm\n"


@pytest.fixture(scope="module")
def linear_graph(lower):
    """linear_gelu_residual(x [batch, 3, 40], W, b, r), a fused op: one kernel; then a
    second, unfused matmul."""
    torch.manual_seed(0)
    g = Graph("linear")
    g.defs = dict(load(FUSED).ops)
    x = g.input("x", t(B, 3, 40))
    r = g.input("r", t(B, 3, 24))
    w = g.const(torch.randn(40, 24) * 0.2, "w")
    b = g.const(torch.randn(24), "b")
    h = g.add("linear_gelu_residual", [x, w, b, r])
    w2 = g.const(torch.randn(24, 7) * 0.2, "w2")
    g.set_outputs((h, g.add("matmul", [h, w2])))
    return g, lower(g)


def test_epilogue_fused_into_gemm(linear_graph):
    g, compiled = linear_graph
    assert call_templates(compiled) == ["gemm", "gemm"]
    # the whole body (matmul, add, gelu, add) is one kernel call for the fused node (the
    # runtime's `linear_post`, which the plain product after it calls too)
    assert compiled.report.kernels[0].nodes == ["v1 = linear_gelu_residual(x, w, b, r)",
                                                "v2 = matmul(v1, w2)"]


def test_primitive_epilogues_are_left_to_rules(lower):
    """Without a fused op from a rule, a bias add after a matmul is its own kernel."""
    g = Graph("unfused")
    x = g.input("x", t(B, 40))
    h = g.add("add", [g.add("matmul", [x, g.const(torch.randn(40, 24), "w")]),
                      g.const(torch.randn(24), "b")])
    g.set_outputs(g.add("relu", [h]))
    assert templates(lower(g)) == ["gemm", "elementwise"]  # add and relu merged


# rows = batch * 3: 3 and 6 take the few-rows path, 30 takes BLAS
@pytest.mark.parametrize("batch", [1, 2, 10])
def test_gemm_matches_reference(linear_graph, batch):
    g, compiled = linear_graph
    torch.manual_seed(batch)
    assert_matches_reference(g, compiled, (torch.randn(batch, 3, 40), torch.randn(batch, 3, 24)))


@pytest.fixture(scope="module")
def batched_graph(lower):
    g = Graph("batched")
    a = g.input("a", t(B, 4, 6, 5))
    c = g.input("c", t(B, 4, 5, 3))
    x = g.input("x", t(B, 6, 5))
    y = g.input("y", t(B, 5, 2))
    g.set_outputs((g.add("relu", [g.add("matmul", [a, c])]), g.add("bmm", [x, y]),
                   g.add("matmul", [x, g.input("w", t(5, 9))])))
    return g, lower(g)


@pytest.mark.parametrize("batch", [1, 3])
def test_batched_and_activation_products(batched_graph, batch):
    g, compiled = batched_graph
    torch.manual_seed(batch)
    inputs = (torch.randn(batch, 4, 6, 5), torch.randn(batch, 4, 5, 3), torch.randn(batch, 6, 5),
              torch.randn(batch, 5, 2), torch.randn(5, 9))
    assert_matches_reference(g, compiled, inputs)


def test_float64_gemm(lower):
    g = Graph("f64")
    x = g.input("x", t(B, 7, dtype="f64"))
    w = g.const(torch.randn(7, 3, dtype=torch.float64), "w")
    g.set_outputs(g.add("sigmoid", [g.add("matmul", [x, w])]))
    compiled = lower(g)
    for batch in (1, 20):
        assert_matches_reference(g, compiled, (torch.randn(batch, 7, dtype=torch.float64),))


def test_integer_matmul_falls_back_to_torch(lower):
    g = Graph("intmm")
    x = g.input("x", t(B, 4, dtype="i64"))
    w = g.const(torch.randint(-3, 3, (4, 2)), "w")
    g.set_outputs(g.add("add", [g.add("matmul", [x, w]), g.scalar(1)]))
    compiled = lower(g)
    assert [f.op for f in compiled.report.fallbacks] == ["matmul"]
    assert "i64" in compiled.report.fallbacks[0].reason
    assert_matches_reference(g, compiled, (torch.randint(-5, 5, (3, 4)),), fallbacks=1)


@pytest.mark.parametrize("x_shape, y_shape", [((5, 0), (0, 4)), ((2, 3, 0), (0, 4)),
                                              ((2, 3, 0), (2, 0, 4)), ((0, 3, 2), (0, 2, 4))])
def test_empty_dims_give_empty_or_zero_products(lower, x_shape, y_shape):
    """An inner dim of 0 sums nothing (zeros); an empty batch gives an empty result."""
    g = Graph("empty")
    x, y = g.input("x", t(*x_shape)), g.input("y", t(*y_shape))
    g.set_outputs(g.add("relu", [g.add("matmul", [x, y])]))
    compiled = lower(g)
    assert templates(compiled)[0] == "gemm"
    assert_matches_reference(g, compiled, (torch.randn(x_shape), torch.randn(y_shape)))
