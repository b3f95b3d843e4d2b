"""The elementwise/broadcast template against the reference executor, at two batch sizes
from one compile: arithmetic, activations, dtype promotion, broadcasting, index maps
(permute, slice, select, expand, layouts) and fusion into one loop."""

from __future__ import annotations

import re

import pytest
import torch
from lowering_support import B, assert_matches_reference, t, templates

from cuvil.ir import Graph

UNARY = ["neg", "sqrt", "rsqrt", "exp", "log", "tanh", "erf", "sigmoid", "silu", "reciprocal",
         "relu", "abs", "relu6", "dropout", "sin", "cos"]
BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum"]


@pytest.fixture(scope="module")
def math_graph(lower):
    """Every unary and binary op, each on its own output (no fusion across outputs)."""
    g = Graph("math")
    x = g.input("x", t(B, 5, 7))
    y = g.input("y", t(7))
    pos = g.add("add", [g.add("abs", [x]), g.scalar(0.5)])  # for sqrt/log/pow
    outs = {op: g.add(op, [pos if op in ("sqrt", "rsqrt", "log") else x]) for op in UNARY}
    outs |= {op: g.add(op, [pos if op == "pow" else x, y]) for op in BINARY}
    outs["gelu"] = g.add("gelu", [x])
    outs["gelu_tanh"] = g.add("gelu", [x], {"approximate": "tanh"})
    outs["hardtanh"] = g.add("hardtanh", [x], {"min_val": -0.5, "max_val": 0.25})
    outs["clamp_lo"] = g.add("clamp", [x], {"min": -0.1})
    outs["square"] = g.add("pow", [x, g.scalar(2.0)])
    g.set_outputs(outs)
    return g, lower(g)


@pytest.mark.parametrize("batch", [1, 4])
def test_unary_and_binary_ops(math_graph, batch):
    g, compiled = math_graph
    torch.manual_seed(batch)
    assert_matches_reference(g, compiled, (torch.randn(batch, 5, 7), torch.randn(7)))


@pytest.fixture(scope="module")
def dtype_graph(lower):
    """Promotion and non-float dtypes: int division, comparisons, logic, where, casts."""
    g = Graph("dtypes")
    i = g.input("i", t(B, 6, dtype="i64"))
    f = g.input("f", t(B, 6))
    m = g.input("m", t(6, dtype="bool"))
    lt = g.add("lt", [f, g.scalar(0.0)])
    outs = (
        g.add("div", [i, g.scalar(3)]),  # int / int -> f32
        g.add("add", [i, g.scalar(2)]),  # stays i64
        g.add("mul", [i, g.scalar(0.5)]),  # float scalar promotes to f32
        g.add("logical_and", [lt, m]),
        g.add("logical_not", [m]),
        g.add("where", [lt, f, g.scalar(-1.0)]),
        g.add("masked_fill", [f, m], {"value": float("-inf")}),
        g.add("cast", [f], {"dtype": "i32"}),
        g.add("cast", [i], {"dtype": "bool"}),
        g.add("eq", [i, g.scalar(1)]),
    )
    g.set_outputs(outs)
    return g, lower(g)


@pytest.mark.parametrize("batch", [1, 3])
def test_dtypes_follow_torch_promotion(dtype_graph, batch):
    g, compiled = dtype_graph
    torch.manual_seed(batch)
    inputs = (torch.randint(-5, 5, (batch, 6)), torch.randn(batch, 6) * 3,
              torch.tensor([True, False, True, True, False, False]))
    assert_matches_reference(g, compiled, inputs)


@pytest.fixture(scope="module")
def movement_graph(lower):
    """Index maps: permute, transpose, slice (negative start, step), select, expand, NHWC."""
    g = Graph("movement")
    x = g.input("x", t(B, 4, 6, 5))
    perm = g.add("permute", [x], {"dims": (0, 2, 3, 1)})
    outs = {
        "permute_relu": g.add("relu", [perm]),  # movement fused with arithmetic
        "transpose": g.add("transpose", [x], {"dim0": 1, "dim1": -1}),
        "slice": g.add("exp", [g.add("slice", [x], {"dim": 2, "start": -4, "end": None,
                                                    "step": 2})]),
        "select": g.add("select", [x], {"dim": 1, "index": -1}),
        "expand": g.add("expand", [g.add("slice", [x], {"dim": 1, "start": 0, "end": 1})],
                        {"shape": (B, 3, 6, 5)}),
        "nhwc": g.add("to_layout", [x], {"layout": "NHWC"}),
    }
    nhwc = outs["nhwc"]
    # an NHWC value plus an NCHW one: the index maps differ per operand
    outs["mixed"] = g.add("add", [g.add("sigmoid", [nhwc]), x])
    g.set_outputs(outs)
    return g, lower(g)


@pytest.mark.parametrize("batch", [1, 2])
def test_movement_and_layouts(movement_graph, batch):
    g, compiled = movement_graph
    torch.manual_seed(batch)
    assert_matches_reference(g, compiled, (torch.randn(batch, 4, 6, 5),))


def test_nhwc_output_is_a_channels_last_view(movement_graph):
    g, compiled = movement_graph
    out = compiled(torch.randn(2, 4, 6, 5))["nhwc"]
    assert out.shape == (2, 4, 6, 5)
    assert out.is_contiguous(memory_format=torch.channels_last)


@pytest.fixture(scope="module")
def fused_graph(lower):
    g = Graph("fused")
    x = g.input("x", t(B, 16))
    y = g.input("y", t(B, 16))
    s = g.add("sigmoid", [x])
    h = g.add("mul", [x, s])  # x used twice: a DAG, not a chain
    h = g.add("add", [h, y])
    h = g.add("tanh", [h])
    g.set_outputs(h)
    return g, lower(g), lower(g, fuse_elementwise=False)


def test_elementwise_chain_is_one_kernel(fused_graph):
    g, fused, unfused = fused_graph
    assert templates(fused) == ["elementwise"]
    entry = unfused.source.split("def entry", 1)[1]
    assert len(re.findall(r"\n    k\d+_\w+\(", entry)) == 4  # mul and add: one library kernel
    assert fused.report.fused and not unfused.report.fused
    x, y = torch.randn(3, 16), torch.randn(3, 16)
    assert_matches_reference(g, fused, (x, y))
    assert_matches_reference(g, unfused, (x, y))


@pytest.fixture(scope="module")
def norm_graph(lower):
    g = Graph("batchnorm")
    x = g.input("x", t(B, 3, 4, 4))
    params = [g.const(torch.rand(3) + 0.5, f"bn.{k}") for k in ("w", "b", "mean", "var")]
    computed = g.input("var", t(3))
    outs = (g.add("batch_norm", [x, *params]),
            g.add("batch_norm", [x, *params[:3], computed], {"eps": 1e-3}))
    g.set_outputs(outs)
    return g, lower(g)


def test_batch_norm_with_constant_and_computed_statistics(norm_graph):
    g, compiled = norm_graph
    for batch in (1, 3):
        assert_matches_reference(g, compiled, (torch.randn(batch, 3, 4, 4), torch.rand(3) + 1))


def test_quantize_round_trip(lower):
    g = Graph("quant")
    x = g.input("x", t(B, 8))
    q = g.add("quantize", [x], {"scale": 0.05, "zero_point": 3, "dtype": "i8"})
    g.set_outputs((q, g.add("dequantize", [q], {"scale": 0.05, "zero_point": 3})))
    compiled = lower(g)
    assert_matches_reference(g, compiled, (torch.randn(5, 8) * 4,))
