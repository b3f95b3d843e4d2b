"""The cost model: shape-aware roofline costs, `.cvr` cost declarations, and bounds."""

from __future__ import annotations

import math

from cuvil.egraph.cost import MAX_COST, CostModel
from cuvil.ir import TensorType, sym
from cuvil.ir.devices import device_params
from cuvil.library import load
from cuvil.ops import infer


def _cost(model: CostModel, op: str, ins: list[TensorType], attrs=None) -> float:
    attrs = attrs or {}
    return model.node_cost(op, attrs, ins, infer(op, ins, attrs, defs=model.defs))


def test_large_and_tiny_matmuls_cost_differently():
    model = CostModel({})
    big = _cost(model, "matmul", [TensorType((1024, 1024), "f32")] * 2)
    tiny = _cost(model, "matmul", [TensorType((2, 2), "f32")] * 2)
    assert big > 100 * tiny > 0
    # 2 * 1024^3 flops at the cpu default of 150 GFLOP/s, plus one launch (2 us)
    assert math.isclose(big, 2 + 2 * 1024**3 / 150e3, rel_tol=1e-6)


def test_fused_op_costs_less_than_its_parts():
    lib = load("op linear(x, w, b) = add(matmul(x, w), b) kernel gemm\n")
    model = CostModel(lib.ops)
    x, w, b = TensorType((64, 512), "f32"), TensorType((512, 512), "f32"), TensorType((512,), "f32")
    mm = TensorType((64, 512), "f32")
    parts = _cost(model, "matmul", [x, w]) + _cost(model, "add", [mm, b])
    assert _cost(model, "linear", [x, w, b]) < parts


def test_an_op_with_no_kernel_family_costs_its_parts():
    """Lowered as its parts (it names no kernel family), it is priced as they are: two
    launches and the product's bytes written and read again."""
    lib = load("op linear(x, w, b) = add(matmul(x, w), b)\n")
    model = CostModel(lib.ops)
    x, w, b = TensorType((64, 512), "f32"), TensorType((512, 512), "f32"), TensorType((512,), "f32")
    mm = TensorType((64, 512), "f32")
    parts = _cost(model, "matmul", [x, w]) + _cost(model, "add", [mm, b])
    assert math.isclose(_cost(model, "linear", [x, w, b]), parts)


def test_symbolic_dims_are_costed_at_the_example_sizes():
    x = TensorType((sym("batch"), 512), "f32")
    w = TensorType((512, 512), "f32")
    small = _cost(CostModel({}, hints={"batch": 1}), "matmul", [x, w])
    large = _cost(CostModel({}, hints={"batch": 512}), "matmul", [x, w])
    assert large > small


def test_declared_costs_and_targets():
    lib = load('target cpu(gflops=10, gbps=5, launch_us=1)\n'
               'cost relu(x) = numel(x) / target.gbps * (1 + (layout(x) == "NHWC"))\n')
    model = CostModel({}, dict(lib.costs), {n: dict(t.params) for n, t in lib.targets.items()})
    nchw = TensorType((1, 8, 4, 4), "f32")
    assert _cost(model, "relu", [nchw]) == 128 / 5
    assert _cost(model, "relu", [nchw.with_(layout="NHWC")]) == 2 * 128 / 5
    # undeclared ops use the roofline with the declared target parameters
    assert _cost(model, "exp", [nchw]) == 1 + max(128 / 1e4, 2 * 512 / 5e3)


def test_costs_are_never_negative_and_never_overflow():
    lib = load("cost relu(x) = 0 - numel(x)\ncost exp(x) = numel(x) / 0\n"
               "cost neg(x) = numel(x) * numel(x) * numel(x) * numel(x)\n")
    model = CostModel({}, dict(lib.costs))
    huge = TensorType((100_000, 100_000), "f32")
    assert _cost(model, "relu", [huge]) == 0.0
    assert _cost(model, "exp", [huge]) == MAX_COST
    assert _cost(model, "neg", [huge]) == MAX_COST


def test_a_declared_cost_can_scale_the_roofline():
    lib = load('cost conv2d(x, w) = roofline() * (1 - 0.2 * (layout(x) == "NHWC"))\n')
    declared, plain = CostModel({}, dict(lib.costs)), CostModel({})
    x, w = TensorType((8, 32, 16, 16), "f32"), TensorType((32, 32, 3, 3), "f32")
    attrs = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1}
    nchw = _cost(plain, "conv2d", [x, w], attrs)
    assert _cost(declared, "conv2d", [x, w], attrs) == nchw
    nhwc = [x.with_(layout="NHWC"), w]
    assert math.isclose(_cost(declared, "conv2d", nhwc, attrs),
                        0.8 * _cost(plain, "conv2d", nhwc, attrs))


def test_a_fused_op_keeps_its_parts_declared_rates():
    """A composite op without a cost of its own charges each part of its body at the rate
    its declared cost gives it: a convolution declared at half its roofline stays at half
    with an epilogue fused into it (else extraction would keep the epilogue apart)."""
    text = ('cost conv2d(x, w) = roofline() * 0.5\n'
            'op conv_relu(x, w) = relu(conv2d(x, w, stride=1, padding=1, dilation=1, groups=1))'
            ' kernel conv\n')
    lib = load(text)
    declared, plain = CostModel(dict(lib.ops), dict(lib.costs)), CostModel(dict(lib.ops))
    x, w = TensorType((8, 32, 16, 16), "f32"), TensorType((32, 32, 3, 3), "f32")
    conv_flops = 2 * 8 * 32 * 16 * 16 * 32 * 9
    fused, unfused = _cost(declared, "conv_relu", [x, w]), _cost(plain, "conv_relu", [x, w])
    gflops = device_params()["cpu"]["gflops"]
    assert math.isclose(unfused - fused, 0.5 * conv_flops / (1e3 * gflops), rel_tol=1e-3)
