"""Composite ops from `.cvr` (`op NAME(params) = BODY kernel FAMILY`): each is inlined and
lowered as one kernel of the family it names when its nodes fit that family, else (or with
no `kernel` clause) as the composition of its parts' kernels; the kernel header names the
composite node and its source line."""

from __future__ import annotations

import pytest
import torch
from lowering_support import B, assert_matches_reference, t, templates

from cuvil.ir import Graph
from cuvil.library import load

CVR = """\
op linear(x, w, b) = add(matmul(x, w), b) kernel gemm
op linear_relu(x, w, b) = relu(linear(x, w, b)) kernel gemm
op affine(x) = add(mul(x, 2.0), 1.0) kernel elementwise
op attn(q, k, v) = matmul(softmax(mul(matmul(q, transpose(k, -2, -1)), 0.5), -1), v)
    kernel attention
op ln_linear(x, lw, lb, w, b) = linear(layer_norm(x, lw, lb, (16,)), w, b)
op softmax_along(x, d) = softmax(x, d)
op linear_parts(x, w, b) = add(matmul(x, w), b)
op linear_broadcast(x, w, r) = add(matmul(x, w), r) kernel gemm
"""


@pytest.fixture(scope="module")
def composite_graph(lower):
    torch.manual_seed(0)
    g = Graph("composite")
    g.defs.update(load(CVR).ops)
    x = g.input("x", t(B, 16))
    q = g.input("q", t(B, 2, 5, 4))
    w, b = g.const(torch.randn(16, 16) * 0.3, "w"), g.const(torch.randn(16), "b")
    lw, lb = g.const(torch.rand(16) + 0.5, "lw"), g.const(torch.randn(16), "lb")
    src = "model.py:12"
    h = g.add("linear_relu", [x, w, b], source=src, origin=("linear_relu", "matmul_add"))
    outs = {
        "linear_relu": h,
        "affine": g.add("affine", [h], source="model.py:13"),
        "attn": g.add("attn", [q, q, q], source="model.py:14"),
        "ln_linear": g.add("ln_linear", [x, lw, lb, w, b], source="model.py:15"),
        "softmax_along": g.add("softmax_along", [q], {"d": 2}),
        "linear_parts": g.add("linear_parts", [x, w, b]),
        "linear_broadcast": g.add("linear_broadcast", [x, w, g.const(torch.randn(3, 1, 16), "r")]),
    }
    g.set_outputs(outs)
    return g, lower(g)


@pytest.mark.parametrize("batch", [1, 3])
def test_composites_match_reference(composite_graph, batch):
    g, compiled = composite_graph
    torch.manual_seed(batch)
    assert_matches_reference(g, compiled, (torch.randn(batch, 16), torch.randn(batch, 2, 5, 4)))


def test_each_composite_that_fits_a_template_is_one_kernel(composite_graph):
    g, compiled = composite_graph
    by_node = {line.split(" = ")[0]: k.template for k in compiled.report.kernels
               for line in k.nodes}
    assert by_node["v1"] == "gemm"  # linear_relu: GEMM + epilogue, through nested linear
    assert by_node["v2"] == "elementwise"
    assert by_node["v3"] == "attention"
    assert by_node["v5"] == "rows"  # softmax_along(d=2)
    assert "v4 = ln_linear" in compiled.report.composed[0]  # no kernel clause: its parts


def test_a_composite_is_one_kernel_only_of_the_family_it_declares(composite_graph):
    g, compiled = composite_graph
    composed = "\n".join(compiled.report.composed)
    kernels_of = {line.split(" = ")[0]: k.template for k in compiled.report.kernels
                  for line in k.nodes}
    assert "v6 = linear_parts" in composed  # fits a GEMM, names no kernel: its parts
    assert "v7 = linear_broadcast" in composed  # kernel gemm; its epilogue grows the shape
    assert kernels_of["v6"] == kernels_of["v7"] == "elementwise"  # the add, on its own
    assert "v1 = linear_relu" not in composed


def test_kernel_header_names_node_rules_and_source(composite_graph):
    g, compiled = composite_graph
    header = compiled.source.split("def k0_gemm")[0].rsplit("# k0_gemm", 1)[1]
    assert "v1 = linear_relu(x, w, b) at model.py:12; rules: linear_relu, matmul_add" in header


def test_identical_layers_share_one_kernel(lower):
    g = Graph("two_layers")
    x = g.input("x", t(B, 16))
    g.defs.update(load(CVR).ops)
    w, b = g.const(torch.randn(16, 16), "w"), g.const(torch.randn(16), "b")
    h = g.add("linear_relu", [g.add("linear_relu", [x, w, b]), w, b])
    g.set_outputs(h)
    compiled = lower(g)
    assert templates(compiled) == ["gemm"]
    assert len(compiled.report.kernels[0].nodes) == 2
    assert_matches_reference(g, compiled, (torch.randn(2, 16),), tol=1e-4)
