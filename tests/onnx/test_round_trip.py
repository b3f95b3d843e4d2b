"""The round trip PyTorch -> Cuvil -> ONNX -> Cuvil gives the same optimized graph.

For the zoo mlp and cnn: `g1 = cuvil.optimize(model, inputs)`, written with
`to_onnx(g1, path, contrib=False)` (fused ops expanded to standard ONNX ops), read back and
optimized again as `g2 = cuvil.optimize(path)`. What is compared:

- the structure: `Graph.structural_hash` (ops, attributes, types and how values flow,
  value names ignored) of each graph with its constants' refs renamed `k0, k1, ...` in node
  order. The refs differ honestly: torch's parameter paths (`layers.0.weight.T`) and the
  optimizer's folded constants (`~fold5`) come back as the ONNX initializer names
  (`layers_0_weight_T`, `c6`); the optimizer re-fuses the expanded ops into the same fused
  ops, folding nothing twice;
- the constants, pairwise in that order: the same dtype, shape and values (bit for bit:
  an initializer holds the float32 tensor as it was);
- the results: both graphs, lowered to kernels, match torch eager within 1e-4 at a batch
  other than the example's.

Not compared: the graph's name, source lines and rule origins (provenance, not
computation).
"""

from __future__ import annotations

import pytest
import torch

import cuvil
from cuvil import zoo
from cuvil.ir import Graph
from cuvil.onnx import to_onnx
from cuvil.runtime import compile_graph

pytest.importorskip("onnx")

SIZES = {"mlp": {"width": 64}, "cnn": {"size": 16}}


def canonical(graph: Graph) -> tuple[str, list[torch.Tensor]]:
    """The structural hash with const refs renamed by position, and the constants so named."""
    g = graph.copy()
    values = []
    for node in list(g):
        if node.op == "const":
            ref = f"k{len(values)}"
            values.append(graph.constants[node.attrs["ref"]])
            g.constants[ref] = values[-1]
            g.replace_node(type(node)(node.name, node.op, node.inputs, {**node.attrs, "ref": ref},
                                      node.type, node.source, node.origin))
    return g.structural_hash(), values


@pytest.fixture(params=sorted(SIZES))
def round_trip(request, tmp_path):
    name = request.param
    model, inputs = zoo.get(name, **SIZES[name])
    g1 = cuvil.optimize(model, inputs)
    path = tmp_path / f"{name}.onnx"
    to_onnx(g1, path, contrib=False)
    return model, g1, cuvil.optimize(path)


def test_reoptimized_graph_has_the_same_structure_and_constants(round_trip):
    _, g1, g2 = round_trip
    (hash1, consts1), (hash2, consts2) = canonical(g1), canonical(g2)
    assert hash1 == hash2, f"\n{g1.to_text()}\n---\n{g2.to_text()}"
    assert len(consts1) == len(consts2)
    for a, b in zip(consts1, consts2, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b)


def test_both_graphs_compiled_match_eager(round_trip):
    model, g1, g2 = round_trip
    torch.manual_seed(1)
    x = torch.randn(3, *g1.type_of(g1.inputs[0]).shape[1:])
    with torch.no_grad():
        want = model(x)
    for graph in (g1, g2):
        got = compile_graph(graph)(x)
        torch.testing.assert_close(torch.as_tensor(got), want, atol=1e-4, rtol=1e-4)
