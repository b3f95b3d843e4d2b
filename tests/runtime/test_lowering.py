"""`lower` hands `build_program` one `Lowering`; `Lowering.split` regenerates the groups
Numba rejected apart, and the program built from it computes what the reference executor
does."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from cuvil.ops.execute import run
from cuvil.runtime import build_program, lower

sys.path.insert(0, str(Path(__file__).parent))
from runtime_support import mlp_graph  # noqa: E402

X = torch.randn(3, 16)


def assert_computes_the_reference(compiled, graph) -> None:
    got, want = compiled(X), run(graph, X)
    torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got[1]["hidden"], want[1]["hidden"], rtol=1e-4, atol=1e-4)


def test_the_built_lowering_computes_what_the_reference_executor_does():
    graph = mlp_graph()
    lowering = lower(graph, threads=1, sizes={"batch": 3})
    assert lowering.program.kernels and lowering.forced == {}
    compiled = build_program(lowering)
    assert compiled.report.compile_s >= compiled.report.lower_s > 0
    assert_computes_the_reference(compiled, graph)


def test_split_puts_each_node_of_a_rejected_group_apart_and_a_lone_node_on_its_fallback():
    graph = mlp_graph()
    lowering = lower(graph, threads=1)
    fused = next(g for g in lowering.groups if len([n for n in g.nodes
                                                     if lowering.prepared[n].op != "scalar"]) > 1)
    nodes = [n for n in fused.nodes if lowering.prepared[n].op != "scalar"]
    split = lowering.split([(fused, "Numba rejected kernel k: typing")])
    assert split.forced == {n: "split" for n in fused.nodes}
    assert all(len([n for n in g.nodes if n in nodes]) <= 1 for g in split.groups)
    lone = next(g for g in split.groups if g.nodes == [nodes[-1]])
    again = split.split([(lone, "Numba rejected kernel k: typing")])
    assert again.forced[nodes[-1]] == "Numba rejected kernel k: typing"
    assert next(g for g in again.groups if nodes[-1] in g.nodes).template == "fallback"
    assert_computes_the_reference(build_program(again), graph)
