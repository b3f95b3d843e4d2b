"""Products that read an operand transposed (the stock `matmul_lt`, `matmul_rt`,
`linear_relu_rt`, `matmul_threshold_grad`): one GEMM kernel call, no copy of the transpose,
and the reference executor's values, on either side, both, odd shapes and one row."""

from __future__ import annotations

import pytest
import torch
from lowering_support import B, assert_matches_reference, call_templates, t

from cuvil.ir import Graph
from cuvil.library import load


def product_graph(name: str, dtype: str = "f32") -> Graph:
    """Every transposed form over a batch `B` of rows: a^T @ c, a @ w^T, a^T @ e^T (both
    sides), relu(a @ w^T + bias), and ReLU's gradient (g @ w, 0 where y <= 0)."""
    g = Graph(name)
    g.defs = dict(load(None).ops)
    a = g.input("a", t(B, 13, dtype=dtype))  # rows B, 13 columns
    c = g.input("c", t(B, 5, dtype=dtype))
    w = g.input("w", t(7, 13, dtype=dtype))  # a weight [N, K] as torch keeps it
    bias = g.input("bias", t(7, dtype=dtype))
    y = g.input("y", t(B, 13, dtype=dtype))
    e = g.input("e", t(6, B, dtype=dtype))
    g.set_outputs((g.add("matmul_lt", [a, c]),                     # [13, 5]: a^T @ c
                   g.add("matmul_rt", [a, w]),                     # [B, 7]: a @ w^T
                   g.add("matmul_tt", [a, e]),                     # [13, 6]: a^T @ e^T
                   g.add("linear_relu_rt", [a, w, bias]),          # [B, 7]
                   g.add("matmul_threshold_grad", [g.add("matmul_rt", [a, w]), w, y,
                                                   g.scalar(0.0)])))  # [B, 13]
    return g


@pytest.fixture(scope="module")
def compiled(lower):
    graph = product_graph("transposed")
    return graph, lower(graph)


def test_each_transposed_product_is_one_gemm_call(compiled):
    graph, program = compiled
    assert set(call_templates(program)) == {"gemm"}
    assert len(call_templates(program)) == 6  # the product inside the ReLU gradient too


@pytest.mark.parametrize("batch", [1, 3, 37, 300])
def test_transposed_products_match_reference(compiled, batch):
    graph, program = compiled
    torch.manual_seed(batch)
    inputs = (torch.randn(batch, 13), torch.randn(batch, 5), torch.randn(7, 13),
              torch.randn(7), torch.randn(batch, 13), torch.randn(6, batch))
    assert_matches_reference(graph, program, inputs, tol=1e-4)


def test_transposed_products_in_float64(lower):
    graph = product_graph("transposed_f64", "f64")
    program = lower(graph)
    for batch in (1, 40):
        torch.manual_seed(batch)
        inputs = [torch.randn(s, dtype=torch.float64) for s in
                  ((batch, 13), (batch, 5), (7, 13), (7,), (batch, 13), (6, batch))]
        assert_matches_reference(graph, program, inputs)
