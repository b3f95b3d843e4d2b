"""Extraction strategies: `latency` minimizes the sum of costs, `throughput` the busiest
resource's load; both against hand-computed optima, and on a graph placed across devices."""

from __future__ import annotations

import pytest
import torch

import cuvil
from cuvil.egraph.extract import Candidate, Problem, exact, resource_loads
from cuvil.ir import Graph, TensorType

STOCK = "stock"  # the stock library, with the targets' placement rules
# a GPU about as fast as the host for these products, a free link: spreading pays
EVEN_GPU = "target cuda(launch_us=0, link_gbps=1000000, gflops=1000000, gbps=10)\n"


def two_products() -> Graph:
    """x @ w1 + x @ w2, the weights constants: two independent products."""
    g = Graph("two_products")
    gen = torch.Generator().manual_seed(0)
    x = g.input("x", TensorType((16, 64), "f32"))
    w1, w2 = (g.const(torch.randn(64, 64, generator=gen)) for _ in range(2))
    g.set_outputs(g.add("add", [g.add("matmul", [x, w1]), g.add("matmul", [x, w2])]))
    return g


def test_minimax_ilp_balances_two_resources():
    """R needs A and B, each on "cpu" (cost 3) or "gpu" (cost 2): the sum is least with
    both on the GPU (4); the busiest resource is least with one on each (3)."""
    def cls(name):
        return [Candidate(f"{name}c", name, 3.0, (), "cpu"),
                Candidate(f"{name}g", name, 2.0, (), "gpu")]

    prob = Problem({"R": [Candidate("r", "R", 0.0, ("A", "B"), "cpu")],
                    "A": cls("A"), "B": cls("B")}, ["R"])
    latency, throughput = exact(prob), exact(prob, minimax=True)
    assert latency.cost == 4.0 and resource_loads(latency.choice, prob.roots) == {
        "cpu": 0.0, "gpu": 4.0}
    assert sorted(resource_loads(throughput.choice, prob.roots).values()) == [2.0, 3.0]
    assert throughput.cost == 5.0


def test_throughput_spreads_the_products_over_both_devices():
    devices = {}
    for strategy in ("latency", "throughput"):
        graph = cuvil.optimize(two_products(), rules=[STOCK, EVEN_GPU],
                               target=["cuda", "cpu"], strategy=strategy)
        devices[strategy] = sorted(n.type.device for n in graph if n.op == "matmul")
        notes = "\n".join(graph.report.notes)
        assert ("throughput: load per call" in notes) == (strategy == "throughput")
    assert devices == {"latency": ["cuda", "cuda"], "throughput": ["cpu", "cuda"]}


def test_with_one_device_the_strategies_agree():
    graphs = [cuvil.optimize(two_products(), strategy=s) for s in ("latency", "throughput")]
    assert str(graphs[0]) == str(graphs[1])


def test_an_unknown_strategy_is_a_one_line_error():
    for entry in (cuvil.optimize, cuvil.compile):
        with pytest.raises(cuvil.CuvilError, match=r"^unknown strategy 'fast'; known: "
                                                   r"latency, throughput$"):
            entry(two_products(), strategy="fast")
