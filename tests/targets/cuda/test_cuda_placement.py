"""Placement end to end: the stock placement rules with `target=["cuda", "cpu"]`, the
extraction's choice, and a compiled model running across both devices (simulated GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import cuvil
from cuvil.cli import probes
from cuvil.ir import Graph, TensorType

STOCK = "stock"  # the stock library, with the targets' placement rules
# a GPU with a free link and free launches: tiny test shapes still pay for placement
FREE_GPU = "target cuda(link_gbps=1000000, launch_us=0, gflops=1000000, gbps=1000000)\n"


def test_extraction_places_the_products_on_cuda():
    model, inputs = probes.get("placement")
    graph = cuvil.optimize(model, inputs, target=["cuda", "cpu"])
    on_cuda = {n.op for n in graph if n.type.device == "cuda"}
    assert {"matmul", "bmm", "softmax", "layer_norm"} <= on_cuda, str(graph)
    back = [n for n in graph if n.op == "to_device" and n.type.device == "cpu"]
    assert len(back) == 2  # the two results: every round trip in between cancelled
    fired = graph.report.rules
    assert fired["matmul_on_cuda"].in_result and fired["add_after_to_cpu"].in_result
    assert "placement (extraction's choice): " in str(graph.report)
    assert " on cuda" in graph.report.placement()


def test_the_cpu_alone_places_nothing():
    model, inputs = probes.get("placement")
    graph = cuvil.optimize(model, inputs, target="cpu")
    assert all(n.type.device == "cpu" for n in graph)
    assert graph.report.placement() == "" and "placement" not in str(graph.report)


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x):
        return torch.softmax(self.fc2(torch.relu(self.fc1(x))), dim=-1)


def test_a_model_compiled_for_cuda_and_cpu_matches_torch():
    torch.manual_seed(0)
    model, x = Small().eval(), torch.randn(3, 8)
    fast = cuvil.compile(model, (x,), rules=[STOCK, FREE_GPU], target=["cuda", "cpu"],
                         cache=False)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x), atol=1e-5, rtol=1e-5)
    placed = set(fast.report.placement.values())
    assert placed >= {"cuda"}, str(fast.report)
    assert not fast.report.fallbacks, fast.report.fallbacks
    assert "placement:" in str(fast.report)
    moves = [s for s in fast.report.steps if s.template == "transfer"]
    assert len(moves) == 2  # x in, the result out: the weights were uploaded once
    assert "2 transfer(s) per call, 4 constant(s) uploaded once" in str(fast.report)
    prof = fast.profile((x,), runs=2)  # every step timed, the GPU's waited for
    torch.testing.assert_close(prof.outputs, model(x).detach(), atol=1e-5, rtol=1e-5)
    assert len(prof.calls) == 2 and len(prof.calls[0].spans) == len(fast.report.steps)


def test_gpu_bench_without_a_gpu_says_so_in_one_line():
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: bench/gpu.py would measure")
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, str(root / "bench" / "gpu.py")], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1 and "no CUDA GPU" in done.stdout


NO_GPU = """
import cuvil
from cuvil.ir import Graph, TensorType
from cuvil.runtime import compile_graph
g = Graph("g")
x = g.add("to_device", [g.input("x", TensorType((3, 4), "f32"))], {"device": "cuda"})
g.set_outputs(g.add("to_device", [g.add("relu", [x])], {"device": "cpu"}))
try:
    compile_graph(g, target=["cuda", "cpu"])
except cuvil.CuvilError as e:
    print(e)
"""


def test_cuda_values_without_a_gpu_are_a_one_line_error():
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", NO_GPU], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1 and "finds no GPU" in done.stdout


# a slow host link and cheap GPU kernels: a weight moved over the link at every call would
# cost more than the product on the host; moved once, it pays
SLOW_LINK = "target cuda(link_gbps=2, launch_us=0.1, gflops=1000000, gbps=1000000)\n"


def weight_gemm(weight_is_input: bool) -> Graph:
    g = Graph("weight_gemm")
    x = g.input("x", TensorType((4, 64), "f32"))
    w = (g.input("w", TensorType((64, 64), "f32")) if weight_is_input
         else g.const(torch.randn(64, 64, generator=torch.Generator().manual_seed(1))))
    g.set_outputs(g.add("relu", [g.add("matmul", [x, w])]))
    return g


def test_a_constant_weight_is_uploaded_once_so_its_gemm_goes_to_cuda(lower):
    """The cost model charges a constant's upload amortized (the runtime copies it once),
    so the weight-heavy product runs on the GPU; the same product with the weight an input
    (copied every call) stays on the host."""
    rules = [STOCK, SLOW_LINK]
    as_input = cuvil.optimize(weight_gemm(True), rules=rules, target=["cuda", "cpu"])
    assert all(n.type.device == "cpu" for n in as_input), str(as_input)
    g = weight_gemm(False)
    placed = cuvil.optimize(g, rules=rules, target=["cuda", "cpu"])
    assert {n.op for n in placed if n.type.device == "cuda"} >= {"matmul"}, str(placed)
    compiled = lower(placed, target=["cuda", "cpu"])
    assert compiled.report.uploads == 1 and not compiled.report.fallbacks
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(compiled(x), cuvil.run(g, x), atol=1e-4, rtol=1e-4)


def test_throughput_placement_runs_across_both_devices_and_matches_reference(lower):
    """strategy="throughput" puts one product on each device (a GPU about as fast as the
    host, tests/egraph/test_strategy.py); the graph it extracts computes the same values."""
    g = Graph("two_products")
    gen = torch.Generator().manual_seed(0)
    x = g.input("x", TensorType((16, 64), "f32"))
    w1, w2 = (g.const(torch.randn(64, 64, generator=gen)) for _ in range(2))
    g.set_outputs(g.add("add", [g.add("matmul", [x, w1]), g.add("matmul", [x, w2])]))
    even = "target cuda(launch_us=0, link_gbps=1000000, gflops=1000000, gbps=10)\n"
    placed = cuvil.optimize(g, rules=[STOCK, even], target=["cuda", "cpu"],
                            strategy="throughput")
    compiled = lower(placed, target=["cuda", "cpu"])
    assert set(compiled.report.placement.values()) == {"cpu", "cuda"}, str(compiled.report)
    assert not compiled.report.fallbacks
    xs = torch.randn(16, 64, generator=gen)
    torch.testing.assert_close(compiled(xs), cuvil.run(g, xs), atol=1e-4, rtol=1e-4)


def test_a_cnn_with_attention_runs_conv_pools_and_attention_on_cuda():
    """The stock placement rules put convolution, pooling and attention on the GPU (a free
    one); the compiled model matches torch, no fallbacks, the weight uploaded once."""
    model, _ = probes.get("placement_cnn")
    x, q = torch.randn(1, 8, 6, 6), torch.randn(1, 2, 5, 8)
    fast = cuvil.compile(model, (x, q), rules=[STOCK, FREE_GPU], target=["cuda", "cpu"],
                         cache=False)
    on_gpu = {k.template for k in fast.report.kernels
              if fast.report.placement[k.name] == "cuda"}
    assert {"conv", "pool", "attention"} <= on_gpu, str(fast.report)
    assert not fast.report.fallbacks and fast.report.uploads == 1
    with torch.no_grad():
        for got, want in zip(fast(x, q), model(x, q), strict=True):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def square_gemm(n: int) -> Graph:
    g = Graph(f"gemm_{n}")
    x = g.input("x", TensorType((n, n), "f32"))
    g.set_outputs(g.add("matmul", [x, g.input("w", TensorType((n, n), "f32"))]))
    return g


def test_default_parameters_put_a_large_gemm_on_cuda_and_a_tiny_one_on_the_cpu():
    """Issue 49's acceptance: `["cuda", "cpu"]`, the stock rules and the targets' own
    parameters; the products' operands and result cross the link at every call. The large
    product is lowered, not run: the simulator would take minutes."""
    large = cuvil.compile(square_gemm(1024), target=["cuda", "cpu"], cache=False)
    [gemm] = [k for k in large.report.kernels if k.template == "gemm"]
    assert large.report.placement[gemm.name] == "cuda", str(large.report)
    assert "3 transfer(s) per call (2 input(s) copied to cuda, 1 result(s) copied back)" \
        in str(large.report)
    tiny = cuvil.compile(square_gemm(4), target=["cuda", "cpu"], cache=False)
    assert set(tiny.report.placement.values()) == {"cpu"}, str(tiny.report)
    assert "lowered for cpu (of targets cuda,cpu): " in str(tiny.report)
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    torch.testing.assert_close(tiny(x, w), x @ w)
