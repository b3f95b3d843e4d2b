"""Int8 layers that pass u8 between them (`rules/quantize/requant.cvr`): a layer whose
output is quantized requantizes in its kernel's epilogue (u8 out), and the next reads
that u8 input in place (`qgemm_layer_q`, `qconv_layer_q`). Against the reference executor:
the u8 values are equal, the f32 outputs equal to rounding."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lowering_support import B, assert_matches_reference, t

from cuvil.ir import Graph
from cuvil.library import load

QUANTIZE = Path(__file__).resolve().parents[2] / "rules" / "quantize"
CVR = "".join(line for name in ("int8.cvr", "requant.cvr")
              for line in (QUANTIZE / name).read_text().splitlines(keepends=True)
              if line.startswith("op "))


def consts(g: Graph, name: str, k: int, n: int, conv: tuple = ()):
    """An int8 weight, its scales and a bias: [K, N] or, with `conv` (KH, KW), [N, K, ...]."""
    shape, ch = ((n, k, *conv), (n, 1, 1)) if conv else ((k, n), (n,))
    return (g.const(torch.randint(-127, 128, shape, dtype=torch.int8), f"{name}q"),
            g.const(torch.rand(ch) * 0.02 + 0.005, f"{name}s"),
            g.const(torch.randn(ch), f"{name}b"))


def steps(compiled) -> list[tuple[str, str]]:
    return [(s.template, str(compiled.graph[s.value].type.dtype)) for s in
            compiled.report.steps if s.kind == "kernel"]


@pytest.fixture(scope="module")
def linear_chain(lower):
    """f32 in -> u8 (requantized) -> u8 (K = 40) -> f32 (K = 18: padded to 4 in a copy);
    the first layer's u8 output is also a graph output."""
    torch.manual_seed(0)
    g = Graph("qchain")
    g.defs.update(load(CVR).ops)
    x = g.input("x", t(B, 3, 22))
    q1 = g.add("qlinear_relu_rq", [x, *consts(g, "w1", 22, 40)],
               {"sx": 0.021, "zx": 60, "sy": 0.05, "zy": 0})
    q2 = g.add("qlinear_relu_u8_rq", [q1, *consts(g, "w2", 40, 18)],
               {"sx": 0.05, "zx": 0, "sy": 0.04, "zy": 2})
    y = g.add("qlinear_u8", [q2, *consts(g, "w3", 18, 9)], {"sx": 0.04, "zx": 2})
    g.set_outputs((q1, y))
    return g, lower(g)


@pytest.mark.parametrize("batch", [1, 5])
def test_requantized_linear_layers_match_the_reference(linear_chain, batch):
    g, compiled = linear_chain
    torch.manual_seed(batch)
    assert_matches_reference(g, compiled, (torch.randn(batch, 3, 22) * 2,), tol=1e-4)


def test_each_layer_of_the_chain_is_one_kernel_with_u8_between(linear_chain):
    _, compiled = linear_chain
    assert steps(compiled) == [("qgemm", "u8"), ("qgemm", "u8"), ("qgemm", "f32")]
    assert "qgemm_layer_q(" in compiled.source and not compiled.report.composed


def test_requantized_convolutions_match_the_reference(lower):
    torch.manual_seed(1)
    g = Graph("qconv_chain")
    g.defs.update(load(CVR).ops)
    x = g.input("x", t(B, 3, 9, 9))
    geo = {"stride": 1, "padding": 1, "dilation": 1, "groups": 1}
    q = g.add("qconv2d_bias_relu_rq", [x, *consts(g, "c1", 3, 8, (3, 3))],
              {**geo, "sx": 0.02, "zx": 100, "sy": 0.03, "zy": 0})
    y = g.add("qconv2d_bias_u8", [q, *consts(g, "c2", 8, 4, (3, 3))],
              {**geo, "sx": 0.03, "zx": 0})
    g.set_outputs(y)
    compiled = lower(g)
    assert steps(compiled) == [("qconv", "u8"), ("qconv", "f32")]
    for batch in (1, 3):
        assert_matches_reference(g, compiled, (torch.randn(batch, 3, 9, 9) * 2,), tol=1e-4)
