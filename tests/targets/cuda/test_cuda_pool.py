"""CUDA pooling (`cuvil/targets/cuda/templates/pool.py`) against the reference executor, under the
CUDA simulator: torch's window bounds (padding, dilation, ceil_mode, count_include_pad),
adaptive windows, NCHW and NHWC."""

from __future__ import annotations

import pytest
from cuda_support import check, on_cuda

WINDOW = {"stride": [2, 2], "padding": [1, 1], "ceil_mode": True}
CASES = {
    "max_ceil_dilated": ("max_pool2d", {"kernel_size": [3, 3], "dilation": [1, 2], **WINDOW}),
    "max_default_stride": ("max_pool2d", {"kernel_size": [2, 2], "stride": []}),
    "avg_include_pad": ("avg_pool2d", {"kernel_size": [3, 2], **WINDOW}),
    "avg_exclude_pad": ("avg_pool2d", {"kernel_size": [3, 3], "count_include_pad": False,
                                       **WINDOW}),
    "adaptive": ("adaptive_avg_pool2d", {"output_size": [3, 2]}),
    "global": ("adaptive_avg_pool2d", {"output_size": [1, 1]}),
}


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_pool_matches_reference(case, layout, lower):
    op, attrs = CASES[case]
    shapes = [(2, 3, 7, 5)]

    def build(g, x):
        if layout == "NCHW":
            return g.add(op, [x], attrs)
        pooled = g.add(op, [g.add("to_layout", [x], {"layout": "NHWC"})], attrs)
        return g.add("to_layout", [pooled], {"layout": "NCHW"})

    check(on_cuda(shapes, build), shapes, lower, {"pool"})
