"""The CUDA convolution (`cuvil/targets/cuda/templates/conv.py`: the implicit GEMM for
groups 1, the direct kernel for the rest) against the reference executor, under the CUDA
simulator: geometries, groups, NHWC, and epilogues fused into the kernel."""

from __future__ import annotations

import pytest
from cuda_support import check, on_cuda

CASES = {  # x, w, attrs
    "3x3_pad": ((1, 2, 4, 4), (3, 2, 3, 3), {"padding": [1, 1]}),
    "stride_dilation_groups": ((2, 4, 5, 6), (6, 2, 3, 3),
                               {"stride": [2, 1], "padding": [1, 1], "dilation": [1, 2],
                                "groups": 2}),
    "depthwise": ((1, 3, 5, 5), (3, 1, 3, 3), {"padding": [1, 1], "groups": 3}),
    "1x1": ((2, 3, 3, 4), (5, 3, 1, 1), {}),
}


def conv(attrs: dict):
    full = {"stride": [1, 1], "padding": [0, 0], "dilation": [1, 1], "groups": 1, **attrs}
    return lambda g, x, w: g.add("conv2d", [x, w], full)


@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_conv_matches_reference(case, lower):
    x, w, attrs = CASES[case]
    check(on_cuda([x, w], conv(attrs)), [x, w], lower, {"conv"})


def test_cuda_conv_epilogue_is_one_kernel(lower):
    """bias + relu + a residual run in the convolution's kernel."""
    shapes = [(2, 2, 4, 4), (3, 2, 3, 3), (1, 3, 1, 1), (2, 3, 4, 4)]

    def build(g, x, w, b, r):
        c = conv({"padding": [1, 1]})(g, x, w)
        return g.add("add", [g.add("relu", [g.add("add", [c, b])]), r])

    compiled = check(on_cuda(shapes, build), shapes, lower, {"conv"})
    assert not any(k.template == "elementwise" for k in compiled.report.kernels)
    assert "conv2d + add + relu + add" in "\n".join(compiled.report.fused)


@pytest.mark.parametrize("groups, read", [(1, "x0[an, hh, ww, ic]"),
                                          (2, "x0[p0, hh, ww, c0 + ic]")])
def test_cuda_conv_in_nhwc(lower, groups, read):
    """NHWC through the implicit GEMM (groups 1) and the direct kernel (groups 2)."""
    shapes = [(1, 4, 4, 5), (4, 4 // groups, 3, 3)]

    def build(g, x, w):
        nhwc = g.add("to_layout", [x], {"layout": "NHWC"})
        out = conv({"padding": [1, 1], "stride": [1, 2], "groups": groups})(g, nhwc, w)
        return g.add("to_layout", [out], {"layout": "NCHW"})

    compiled = check(on_cuda(shapes, build), shapes, lower, {"conv"})
    assert read in compiled.source
