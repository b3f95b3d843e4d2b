"""Every CUDA kernel generator against the reference executor, under the CUDA simulator.

Each graph moves its inputs to `cuda`, computes there and moves the result back, as the
placement rules leave it; compiled for `["cuda", "cpu"]`, every node on `cuda` must be
lowered by a CUDA kernel (no fallback) and match `cuvil.run` on random inputs. Shapes are
tiny: the simulator runs every thread in Python.
"""

from __future__ import annotations

import pytest
import torch

import cuvil
from cuvil.ir import Graph, TensorType


def t(*shape, dtype="f32"):
    return TensorType(shape, dtype)


def on_cuda(shapes, build, name="cuda_case") -> Graph:
    """A graph: inputs of `shapes` moved to cuda, `build(g, *values)` there, moved back."""
    g = Graph(name)
    xs = [g.add("to_device", [g.input(f"x{i}", t(*s))], {"device": "cuda"})
          for i, s in enumerate(shapes)]
    result = build(g, *xs)
    g.set_outputs(g.add("to_device", [result], {"device": "cpu"}))
    return g


def check(g: Graph, shapes, lower, templates: set[str], fallbacks: int = 0):
    compiled = lower(g, target=["cuda", "cpu"])
    assert len(compiled.report.fallbacks) == fallbacks, compiled.report.fallbacks
    placed = compiled.report.placement
    on_gpu = {k.template for k in compiled.report.kernels if placed[k.name] == "cuda"}
    assert templates <= on_gpu, (on_gpu, compiled.source)
    inputs = [torch.randn(*s, generator=torch.Generator().manual_seed(i))
              for i, s in enumerate(shapes)]
    torch.testing.assert_close(compiled(*inputs), cuvil.run(g, *inputs), atol=1e-5, rtol=1e-5)
    return compiled


ELEMENTWISE = {
    "relu_mul_tanh": ([(3, 5)], lambda g, x: g.add("tanh", [g.add("mul", [
        g.add("relu", [x]), g.scalar(2.0)])])),
    "bias_broadcast": ([(4, 6), (6,)], lambda g, x, b: g.add("add", [x, b])),
    "column_broadcast": ([(4, 6), (4, 1)], lambda g, x, c: g.add("sub", [x, c])),
    "gelu_sigmoid": ([(2, 3, 4)], lambda g, x: g.add("sigmoid", [
        g.add("gelu", [x], {"approximate": "none"})])),
    "transpose_exp": ([(3, 5)], lambda g, x: g.add("exp", [
        g.add("transpose", [x], {"dim0": 0, "dim1": 1})])),
    "where_compare": ([(4, 4), (4, 4)], lambda g, x, y: g.add("maximum", [
        x, g.add("sqrt", [g.add("abs", [y])])])),
}


@pytest.mark.parametrize("case", sorted(ELEMENTWISE))
def test_cuda_elementwise_matches_reference(case, lower):
    shapes, build = ELEMENTWISE[case]
    check(on_cuda(shapes, build), shapes, lower, {"elementwise"})


GEMMS = {
    "matrix": ([(5, 7), (7, 9)], "matmul"),
    "rows_of_a_3d_input": ([(2, 3, 17), (17, 6)], "matmul"),
    "batched": ([(2, 4, 5), (2, 5, 3)], "bmm"),
    "tall_tiles": ([(20, 18), (18, 33)], "matmul"),
}


@pytest.mark.parametrize("case", sorted(GEMMS))
def test_cuda_gemm_matches_reference(case, lower):
    shapes, op = GEMMS[case]
    check(on_cuda(shapes, lambda g, x, w: g.add(op, [x, w])), shapes, lower, {"gemm"})


ROWS = {
    "softmax": ({"dim": -1}, [(3, 7)]),
    "log_softmax": ({"dim": -1}, [(2, 2, 5)]),
    "sum": ({"dim": [-1], "keepdim": True}, [(4, 6)]),
    "mean": ({"dim": [-1], "keepdim": False}, [(4, 6)]),
    "amax": ({"dim": [-1], "keepdim": True}, [(3, 5)]),
}


@pytest.mark.parametrize("op", sorted(ROWS))
def test_cuda_rows_match_reference(op, lower):
    attrs, shapes = ROWS[op]
    check(on_cuda(shapes, lambda g, x: g.add(op, [x], attrs)), shapes, lower, {"rows"})


def test_cuda_layer_norm_matches_reference(lower):
    shapes = [(3, 8), (8,), (8,)]

    def build(g, x, w, b):
        return g.add("layer_norm", [x, w, b], {"normalized_shape": [8], "eps": 1e-5})

    check(on_cuda(shapes, build), shapes, lower, {"rows"})


@pytest.mark.parametrize("rank", [2, 3])
def test_cuda_gemm_epilogue_matches_reference(rank, lower):
    """bias + relu + a residual, in the GEMM kernel: one kernel, one output array."""
    lead = (2, 3)[:rank - 1]
    shapes = [(*lead, 6), (6, 5), (5,), (*lead, 5)]

    def build(g, x, w, b, r):
        return g.add("add", [g.add("relu", [g.add("add", [g.add("matmul", [x, w]), b])]), r])

    compiled = check(on_cuda(shapes, build), shapes, lower, {"gemm"})
    assert not any(k.template == "elementwise" for k in compiled.report.kernels)
    assert "matmul + add + relu + add" in "\n".join(compiled.report.fused)


def test_device_buffers_and_transfers(lower):
    """Values on cuda live in device arrays; the boundaries are copies; chains are fused."""
    shapes = [(5, 7), (7, 9)]

    def build(g, x, w):
        y = g.add("tanh", [g.add("relu", [g.add("matmul", [x, w])])])
        return g.add("exp", [g.add("softmax", [y], {"dim": -1})])

    compiled = check(on_cuda(shapes, build), shapes, lower,
                     {"gemm", "rows", "elementwise", "transfer"})
    assert "matmul + relu + tanh" in "\n".join(compiled.report.fused)
    assert "from cuvil.runtime.cuda import" in compiled.source
    assert "k1_gemm [gemm] " in str(compiled.report) and " on cuda" in str(compiled.report)


def conv_on_cuda() -> Graph:
    def build(g, x, w):
        conv = g.add("conv2d", [x, w], {"stride": [1, 1], "padding": [1, 1],
                                        "dilation": [1, 1], "groups": 1})
        return g.add("relu", [conv])

    return on_cuda([(1, 2, 4, 4), (3, 2, 3, 3)], build, "conv_on_cuda")


def test_fallback_policy_cpu_runs_a_node_without_a_cuda_kernel_on_the_host(lower):
    g = conv_on_cuda()
    compiled = check(g, [(1, 2, 4, 4), (3, 2, 3, 3)], lower, {"elementwise"}, fallbacks=1)
    [fallback] = compiled.report.fallbacks
    assert fallback.op == "conv2d" and "runs on the CPU, copies in and out" in fallback.reason


def test_fallback_policy_error_refuses_it(lower):
    with pytest.raises(cuvil.CuvilError, match="fallback_policy='error'.*conv2d"):
        lower(conv_on_cuda(), target=["cuda", "cpu"], fallback_policy="error")
