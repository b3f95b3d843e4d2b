"""Every CUDA kernel generator against the reference executor, under the CUDA simulator.

Each graph moves its inputs to `cuda`, computes there and moves the result back, as the
placement rules leave it; compiled for `["cuda", "cpu"]`, every node on `cuda` must be
lowered by a CUDA kernel (no fallback) and match `cuvil.run` on random inputs. Shapes are
tiny: the simulator runs every thread in Python.
"""

from __future__ import annotations

import pytest
import torch
from cuda_support import check, on_cuda

import cuvil

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
    "rotary_sin_cos": ([(4, 6), (6,)], lambda g, x, p: g.add("add", [
        g.add("mul", [x, g.add("cos", [p])]), g.add("mul", [x, g.add("sin", [p])])])),
    "minimum_clamp": ([(4, 6), (4, 1)], lambda g, x, c: g.add("minimum", [
        g.add("maximum", [x, g.add("neg", [c])]), c])),
    "hardswish_hardsigmoid": ([(3, 8)], lambda g, x: g.add("mul", [
        g.add("hardswish", [x]), g.add("hardsigmoid", [x])])),
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
    "var": ({"dim": [-1], "keepdim": False, "correction": 1}, [(4, 6)]),
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


def test_cuda_layer_norm_rstd_and_gradient_match_reference(lower):
    """The rstd a training layer norm saves, and its input gradient from that rstd (a
    positive input), as CUDA row kernels."""
    check(on_cuda([(3, 8)], lambda g, x: g.add("layer_norm_rstd", [x], {
        "normalized_shape": [8], "eps": 1e-5})), [(3, 8)], lower, {"rows"})
    shapes = [(3, 8), (3, 8), (3, 1), (3, 1), (8,)]

    def build(g, dy, x, mean, rstd, w):
        return g.add("layer_norm_grad", [dy, x, mean, rstd, w], {"normalized_shape": [8]})

    inputs = [torch.randn(*s, generator=torch.Generator().manual_seed(i))
              for i, s in enumerate(shapes)]
    inputs[3] = inputs[3].abs() + 0.5
    check(on_cuda(shapes, build), shapes, lower, {"rows"}, inputs=inputs)


def test_cuda_flip_is_read_backwards_in_a_loop(lower):
    check(on_cuda([(3, 5)], lambda g, x: g.add("mul", [g.add("flip", [x], {"dims": [1]}),
                                                       x])), [(3, 5)], lower, {"elementwise"})


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
    assert "from cuvil.targets.cuda.runtime import" in compiled.source
    assert "k1_gemm [gemm] " in str(compiled.report) and " on cuda" in str(compiled.report)


def int8_product_on_cuda():
    """An int8 product on cuda: the CUDA target declares no kernel for it (`WITHOUT_KERNEL`)."""
    def build(g, x, w):
        return g.add("relu", [g.add("matmul_i8", [x, w])])

    return on_cuda([(2, 3), (3, 4)], build, "int8_on_cuda", dtypes=["i8", "i8"])


def test_fallback_policy_cpu_runs_a_node_without_a_cuda_kernel_on_the_host(lower):
    inputs = [torch.randint(-9, 9, s, dtype=torch.int8) for s in [(2, 3), (3, 4)]]
    compiled = check(int8_product_on_cuda(), [], lower, {"elementwise"}, fallbacks=1,
                     inputs=inputs)
    [fallback] = compiled.report.fallbacks
    assert fallback.op == "matmul_i8"
    assert fallback.reason == ("int8 GEMMs have no CUDA kernel; runs on the CPU, copies in "
                               "and out")


def test_fallback_policy_error_refuses_it(lower):
    with pytest.raises(cuvil.CuvilError, match="fallback_policy='error'.*matmul_i8"):
        lower(int8_product_on_cuda(), target=["cuda", "cpu"], fallback_policy="error")
