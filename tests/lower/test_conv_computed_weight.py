"""A convolution whose weight (and bias) are values of the graph, as in a training graph,
where they are parameters passed each call: on the drivers faster than torch's there
(`templates.conv.COMPUTED`) it runs on Cuvil's kernel, the weight arranged at the call
(`templates.conv._computed_weight`, `kernels.conv_raw`), with the results of torch for new
weights every call; on the others, in torch."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import cuvil

SIGMOID_RULES = """
ruleset fusion_conv_sigmoid
op conv2d_bias_sigmoid(x, w, b, stride, padding, dilation, groups) =
    sigmoid(conv2d_bias(x, w, b, stride, padding, dilation, groups)) kernel conv
rule conv_bias_sigmoid: sigmoid(conv2d_bias(x, w, b, s, p, d, g))
    => conv2d_bias_sigmoid(x, w, b, s, p, d, g)
"""

CASES = {  # name -> (input shape, weight shape, conv2d keywords, epilogue), the driver's
    "few channels": ((2, 3, 16, 16), (8, 3, 3, 3), {"padding": 1}, "relu"),
    "Winograd": ((2, 16, 16, 16), (16, 16, 3, 3), {"padding": 1}, "relu"),
    "direct tile": ((2, 16, 17, 17), (16, 16, 3, 3), {"padding": 1}, "relu"),
    "direct, stride 2": ((2, 16, 32, 32), (32, 16, 3, 3), {"padding": 1, "stride": 2}, ""),
    "generated epilogue": ((2, 16, 16, 16), (16, 16, 3, 3), {"padding": 1}, "sigmoid"),
    "generated, direct": ((2, 16, 17, 17), (16, 16, 3, 3), {"padding": 1}, "sigmoid"),
}


class Conv(nn.Module):
    def __init__(self, keywords: dict, epilogue: str):
        super().__init__()
        self.keywords, self.epilogue = keywords, epilogue

    def forward(self, x, w, b):
        y = nn.functional.conv2d(x, w, b, **self.keywords)
        return getattr(torch, self.epilogue)(y) if self.epilogue else y


@pytest.mark.parametrize("case", CASES)
def test_a_computed_weight_runs_on_cuvils_kernel_and_matches_torch(case):
    xs, ws, keywords, epilogue = CASES[case]
    torch.manual_seed(0)
    model = Conv(keywords, epilogue)
    args = (torch.randn(xs), torch.randn(ws), torch.randn(ws[0]))
    compiled = cuvil.compile(model, args, threads=2, rules=[None, SIGMOID_RULES])
    assert not compiled.report.fallbacks
    assert [k.template for k in compiled.report.kernels] == ["conv"]
    for _ in range(2):  # new weights every call: nothing of the first call's is kept
        args = (torch.randn(xs), torch.randn(ws), torch.randn(ws[0]))
        torch.testing.assert_close(compiled(*args), model(*args), atol=1e-4, rtol=1e-4)


def test_a_common_epilogue_is_a_compiled_driver():
    """Bias and ReLU with a computed weight: the `_raw` driver itself, nothing generated."""
    xs, ws, keywords, epilogue = CASES["Winograd"]
    model = Conv(keywords, epilogue)
    compiled = cuvil.compile(model, (torch.randn(xs), torch.randn(ws), torch.randn(ws[0])))
    assert "conv2d_nchw_winograd_post_raw  #" in compiled.source
    assert "@njit" not in compiled.source


IN_TORCH = {  # name -> (input shape, weight shape, conv2d keywords): slower on Cuvil's
    "1x1": ((2, 16, 3, 3), (32, 16, 1, 1), {}),
    "im2col": ((2, 64, 4, 4), (64, 64, 3, 3), {"padding": 1}),
    "direct, rows of 8": ((2, 16, 16, 16), (32, 16, 3, 3), {"padding": 1, "stride": 2}),
    "grouped": ((2, 16, 9, 9), (16, 4, 3, 3), {"groups": 4, "padding": 1}),
    "depthwise": ((2, 8, 8, 8), (8, 1, 3, 3), {"groups": 8, "padding": 1}),
}


@pytest.mark.parametrize("case", IN_TORCH)
def test_a_computed_weight_on_a_slower_driver_runs_in_torch(case):
    xs, ws, keywords = IN_TORCH[case]
    model = Conv(keywords, "relu")
    args = (torch.randn(xs), torch.randn(ws), torch.randn(ws[0]))
    compiled = cuvil.compile(model, args)
    assert {f.op for f in compiled.report.fallbacks} == {"conv2d"}
    torch.testing.assert_close(compiled(*args), model(*args))


def test_the_winograd_transform_at_the_call_is_the_constants():
    """`winograd_weight_of` (at the call) gives what lowering makes of a constant weight."""
    import numpy as np

    from cuvil.targets.cpu.kernels.winograd import winograd_weight_of
    from cuvil.targets.cpu.templates.conv_drivers import winograd_weight

    w = np.random.default_rng(0).standard_normal((5, 3, 3, 3)).astype(np.float32)
    np.testing.assert_array_equal(winograd_weight_of(w), winograd_weight(w))
