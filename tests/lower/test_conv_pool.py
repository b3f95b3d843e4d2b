"""Convolution (im2col + GEMM, 1x1, depthwise; stride, padding, dilation) with epilogues,
and pooling, each in NCHW and NHWC, against the reference executor."""

from __future__ import annotations

import re

import pytest
import torch
from lowering_support import B, assert_matches_reference, call_templates, t

from cuvil.ir import Graph


def conv_graph(layout: str) -> Graph:
    torch.manual_seed(0)
    g = Graph(f"conv_{layout}")
    x = g.input("x", t(B, 8, 11, 9))
    h = g.add("to_layout", [x], {"layout": layout}) if layout == "NHWC" else x
    w1, b1 = g.const(torch.randn(16, 8, 3, 3) * 0.2, "w1"), g.const(torch.randn(16, 1, 1), "b1")
    h = g.add("relu", [g.add("add", [g.add("conv2d", [h, w1], {"stride": (2, 1),
                                                             "padding": (1, 1)}), b1])])
    w2 = g.const(torch.randn(16, 1, 3, 3) * 0.2, "w2")
    dw = g.add("conv2d", [h, w2], {"padding": (1, 1), "groups": 16})
    h = g.add("hardtanh", [dw], {"min_val": 0.0, "max_val": 6.0})
    w3 = g.const(torch.randn(16, 16, 1, 1) * 0.2, "w3")
    pw = g.add("add", [g.add("conv2d", [h, w3]), h])  # 1x1 conv + residual
    w4 = g.const(torch.randn(4, 16, 2, 2) * 0.2, "w4")
    dil = g.add("conv2d", [pw, w4], {"dilation": (2, 2), "stride": (1, 2)})
    g.set_outputs((pw, dil))
    return g


@pytest.fixture(scope="module", params=["NCHW", "NHWC"])
def convs(request, lower):
    g = conv_graph(request.param)
    return g, lower(g)


@pytest.mark.parametrize("batch", [1, 3])
def test_convolutions(convs, batch):
    g, compiled = convs
    assert call_templates(compiled).count("conv") == 4
    torch.manual_seed(batch)
    assert_matches_reference(g, compiled, (torch.randn(batch, 8, 11, 9),), tol=1e-4)


def pool_graph(layout: str) -> Graph:
    g = Graph(f"pool_{layout}")
    x = g.input("x", t(B, 3, 9, 11))
    h = g.add("to_layout", [x], {"layout": layout}) if layout == "NHWC" else x
    ops = [
        ("max_pool2d", {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1)}),
        ("max_pool2d", {"kernel_size": (2, 3), "stride": (2, 2), "dilation": (2, 1),
                        "ceil_mode": True}),
        ("avg_pool2d", {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1),
                        "count_include_pad": False}),
        ("avg_pool2d", {"kernel_size": (3, 2), "padding": (1, 1), "ceil_mode": True}),
        ("adaptive_avg_pool2d", {"output_size": (1, 1)}),
        ("adaptive_avg_pool2d", {"output_size": (4, 3)}),
        # every window inside the image: the written-out form (NCHW)
        ("max_pool2d", {"kernel_size": (2, 2)}),
        ("max_pool2d", {"kernel_size": (3, 3), "stride": (2, 2)}),
        ("avg_pool2d", {"kernel_size": (3, 3), "stride": (1, 1)}),
        ("avg_pool2d", {"kernel_size": (2, 3), "stride": (2, 1)}),
        ("max_pool2d", {"kernel_size": (2, 2), "ceil_mode": True}),  # a partial last window
    ]
    g.set_outputs(tuple(g.add(op, [h], attrs) for op, attrs in ops))
    return g


@pytest.fixture(scope="module", params=["NCHW", "NHWC"])
def pools(request, lower):
    g = pool_graph(request.param)
    return g, lower(g)


@pytest.mark.parametrize("batch", [1, 2])
def test_pooling(pools, batch):
    g, compiled = pools
    if g.name == "pool_NCHW":  # four pools are the runtime's (windows inside), one generated
        name = re.search(r"^(k\d+_pool) = pool_inside_nchw  #", compiled.source, re.M)[1]
        assert compiled.source.split("def entry(")[1].count(f"{name}(") == 4
        assert re.search(r"^k\d+_pool = global_average_nchw  #", compiled.source, re.M)
    torch.manual_seed(batch)
    assert_matches_reference(g, compiled, (torch.randn(batch, 3, 9, 11),))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("geo", [dict(groups=2), dict(groups=4, stride=(2, 1), padding=(1, 1)),
                                 dict(groups=3, padding=(2, 1), dilation=(2, 1))])
def test_grouped_convolution(lower, layout, geo):
    """A grouped convolution (+ bias + ReLU) runs on the grouped driver, no fallback, and
    matches the reference at batch 1 (units are groups) and 3."""
    torch.manual_seed(0)
    g = Graph(f"grouped_{layout}")
    groups = geo["groups"]
    x = g.input("x", t(B, 4 * groups, 7, 6))
    h = g.add("to_layout", [x], {"layout": layout}) if layout == "NHWC" else x
    w = g.const(torch.randn(2 * groups, 4, 3, 3) * 0.2, "w")
    b = g.const(torch.randn(2 * groups, 1, 1), "b")
    y = g.add("relu", [g.add("add", [g.add("conv2d", [h, w], geo), b])])
    g.set_outputs(g.add("to_layout", [y], {"layout": "NCHW"}) if layout == "NHWC" else y)
    compiled = lower(g)
    assert not compiled.report.fallbacks
    assert f"conv2d_{layout.lower()}_grouped(" in compiled.source
    for batch in (1, 3):
        assert_matches_reference(g, compiled, (torch.randn(batch, 4 * groups, 7, 6),),
                                 tol=1e-4)
