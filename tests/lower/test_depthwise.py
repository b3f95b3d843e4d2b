"""The depthwise NCHW template (taps written out, epilogue fused) against torch eager:
strides, dilation, uneven kernels and padding, with and without a fused bias + ReLU6,
on one thread and on two (planes split between threads). A square stride-1 window is the
runtime's driver instead (`runtime.depthwise`, tested in tests/runtime)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import cuvil

GEOMETRIES = [  # (kernel, stride, padding, dilation)
    ((3, 3), (1, 1), (1, 1), (1, 1)),
    ((3, 3), (2, 2), (1, 1), (1, 1)),
    ((3, 5), (1, 2), (2, 1), (1, 1)),
    ((3, 3), (1, 1), (2, 2), (2, 2)),
    ((5, 5), (2, 1), (0, 2), (1, 1)),
]


def depthwise(kernel, stride, padding, dilation, epilogue: bool) -> nn.Module:
    torch.manual_seed(0)
    conv = nn.Conv2d(12, 12, kernel, stride, padding, dilation, groups=12, bias=epilogue)
    return (nn.Sequential(conv, nn.ReLU6()) if epilogue else conv).eval()


LIBRARY = GEOMETRIES[0]  # what `depthwise_nchw_post` computes


def check(model, threads: int, batches=(1, 5), library: bool = False) -> None:
    example = torch.randn(2, 12, 13, 10)
    compiled = cuvil.compile(model, (example,), threads=threads)
    assert not compiled.report.fallbacks
    kernel = "= depthwise_nchw_post  #" if library else "depthwise, taps unrolled, epilogue fused"
    assert kernel in compiled.source
    for batch in batches:
        x = torch.randn(batch, 12, 13, 10) * 4
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "k{}s{}p{}d{}".format(*g))
def test_depthwise_with_epilogue_matches_torch(geometry):
    check(depthwise(*geometry, epilogue=True), threads=2, library=geometry == LIBRARY)


@pytest.mark.parametrize("geometry", GEOMETRIES[1:3], ids=["s2", "k3x5"])
def test_bare_depthwise_matches_torch(geometry):
    check(depthwise(*geometry, epilogue=False), threads=2)


@pytest.mark.parametrize("geometry", [GEOMETRIES[0], GEOMETRIES[3]], ids=["driver", "generated"])
def test_large_depthwise_splits_planes_between_threads(geometry):
    model = depthwise(*geometry, epilogue=True)
    for threads in (1, 2):
        check(model, threads, batches=(64,), library=geometry == LIBRARY)
