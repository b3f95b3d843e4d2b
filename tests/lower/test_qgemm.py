"""Int8 layers (quantize, int8 product, dequantizing epilogue) lowered to one int8 kernel
each (`qgemm`, `qconv`), against the reference executor: the kernels compute the same
int32 sums, so only the f32 epilogue may round differently."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch
from lowering_support import B, assert_matches_reference, t, templates

import cuvil
from cuvil.ir import Graph
from cuvil.library import load

STOCK = Path(__file__).resolve().parents[2] / "rules" / "quantize" / "int8.cvr"
CVR = "".join(line for line in STOCK.read_text().splitlines(keepends=True)
              if line.startswith("op ")) + """\
op qlinear_s8(x, wq, ws, b, sx, zx) = add(mul(dequantize(matmul_i8(
    quantize(x, scale=sx, zero_point=zx, dtype="i8"), wq, x_zero=zx), scale=sx), ws), b)
    kernel qgemm
op qlinear_tanh(x, wq, ws, b, sx, zx) = tanh(qlinear(x, wq, ws, b, sx, zx)) kernel qgemm
"""


def int8(g: Graph, name: str, *shape):
    return g.const(torch.randint(-127, 128, shape, dtype=torch.int8), name)


def scales(g: Graph, name: str, *shape):
    return g.const(torch.rand(shape) * 0.02 + 0.005, name)


@pytest.fixture(scope="module")
def linear_graph(lower):
    """Rank-3 input (leading dims flatten), K not a multiple of 4, u8 and s8 inputs with
    zero points, with and without bias and ReLU, two shapes of weight."""
    torch.manual_seed(0)
    g = Graph("qlinear")
    g.defs.update(load(CVR).ops)
    x = g.input("x", t(B, 3, 22))
    wq1, ws1, b1 = int8(g, "wq1", 22, 40), scales(g, "ws1", 40), g.const(torch.randn(40), "b1")
    h = g.add("qlinear_relu", [x, wq1, ws1, b1], {"sx": 0.021, "zx": 60}, source="m.py:1")
    wq2, ws2 = int8(g, "wq2", 40, 17), scales(g, "ws2", 17)
    m = g.add("qmatmul", [h, wq2, ws2], {"sx": 0.03, "zx": 0}, source="m.py:2")
    wq3, ws3, b3 = int8(g, "wq3", 17, 9), scales(g, "ws3", 9), g.const(torch.randn(9), "b3")
    s = g.add("qlinear_s8", [m, wq3, ws3, b3], {"sx": 0.05, "zx": -3}, source="m.py:3")
    g.set_outputs((h, s))
    return g, lower(g)


@pytest.mark.parametrize("batch", [1, 5])
def test_int8_linear_layers_match_reference(linear_graph, batch):
    g, compiled = linear_graph
    torch.manual_seed(batch)
    x = torch.randn(batch, 3, 22) * 2
    assert_matches_reference(g, compiled, (x,), tol=1e-4)


def test_every_int8_linear_layer_is_one_call_of_one_shared_kernel(linear_graph):
    _, compiled = linear_graph
    assert templates(compiled) == ["qgemm"]  # the kernel's text is shape- and scale-free
    steps = [s for s in compiled.report.steps if s.kind == "kernel"]
    assert [s.template for s in steps] == ["qgemm"] * 3
    assert not compiled.report.composed
    header = compiled.source.split("def k0_qgemm")[0]
    assert "qlinear_relu(x, wq1, ws1, b1) at m.py:1" in header
    int8 = "cuvil.targets.cpu.kernels.int8"
    assert f"from {int8} import qgemm_layer  # {int8} " in compiled.source


@pytest.fixture(scope="module")
def conv_graph(lower):
    """Stride, padding, dilation, K = 3 * 3 * 3 = 27, the input's zero point as padding."""
    torch.manual_seed(1)
    g = Graph("qconv")
    g.defs.update(load(CVR).ops)
    x = g.input("x", t(B, 3, 9, 7))
    wq, ws = int8(g, "wq", 6, 3, 3, 3), scales(g, "ws", 6, 1, 1)
    b = g.const(torch.randn(6, 1, 1), "b")
    geo = {"stride": (2, 1), "padding": (1, 2), "dilation": (1, 2), "groups": 1}
    h = g.add("qconv2d_bias_relu", [x, wq, ws, b], {**geo, "sx": 0.02, "zx": 100})
    wq2, ws2 = int8(g, "wq2", 4, 6, 1, 1), scales(g, "ws2", 4, 1, 1)
    one = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1}
    y = g.add("qconv2d", [h, wq2, ws2], {**one, "sx": 0.04, "zx": 0})
    g.set_outputs(y)
    return g, lower(g)


@pytest.mark.parametrize("batch", [1, 3])
def test_int8_convolutions_match_reference(conv_graph, batch):
    g, compiled = conv_graph
    torch.manual_seed(batch)
    x = torch.randn(batch, 3, 9, 7) * 2
    assert_matches_reference(g, compiled, (x,), tol=1e-4)
    assert templates(compiled) == ["qconv"]
    assert [s.template for s in compiled.report.steps if s.kind == "kernel"] == ["qconv"] * 2


def test_a_layer_the_int8_kernels_cannot_take_stays_composed(lower):
    """A tanh epilogue, a computed bias: the parts' kernels, the product through torch, as
    before; the kernel template is never picked for a group it would refuse."""
    torch.manual_seed(2)
    g = Graph("qcomposed")
    g.defs.update(load(CVR).ops)
    x, bias = g.input("x", t(B, 12)), g.input("bias", t(8))
    wq, ws = int8(g, "wq", 12, 8), scales(g, "ws", 8)
    a = g.add("qlinear_tanh", [x, wq, ws, g.const(torch.randn(8), "b")], {"sx": 0.02, "zx": 9})
    c = g.add("qlinear", [x, wq, ws, bias], {"sx": 0.02, "zx": 9})
    g.set_outputs((a, c))
    compiled = lower(g)
    assert "qgemm" not in templates(compiled)
    assert len(compiled.report.composed) == 2
    assert_matches_reference(g, compiled, (torch.randn(4, 12), torch.randn(8)), tol=1e-4,
                             fallbacks=2)


@pytest.fixture(scope="module")
def all_int8_rules(tmp_path_factory):
    """The stock rules with every int8 op's cost near 0: extraction takes int8 wherever a
    rule fires, whatever the layer's size (what the default costs pick is theirs to say)."""
    from cuvil.library.loader import stock_rules_dir

    rules = tmp_path_factory.mktemp("rules") / "rules"
    shutil.copytree(stock_rules_dir(), rules)
    int8 = rules / "quantize" / "int8.cvr"
    int8.write_text(re.sub(r"^(cost q\w+\([^)]*\)) = .*$", r"\1 = 0.001", int8.read_text(),
                           flags=re.M))
    return rules


@pytest.fixture(scope="module", params=["mlp", "cnn", "mlp-stock", "cnn-stock"])
def quantized_digits(request, all_int8_rules):
    pytest.importorskip("sklearn")
    from cuvil.zoo import digits

    d = digits.digits_mlp() if request.param.startswith("mlp") else digits.digits_cnn()
    q = cuvil.Quantize(calibration=d.calibration(batches=8))
    rules = {} if request.param.endswith("stock") else {"rules": all_int8_rules}
    return d, cuvil.compile(d.model, (d.x_test[:32],), quantize=q, **rules), request.param


def test_quantized_digits_run_one_int8_kernel_per_int8_layer(quantized_digits):
    _, compiled, variant = quantized_digits
    report = compiled.report
    assert not report.fallbacks and not report.composed
    products = [n for n in compiled.graph if n.op in ("matmul_i8", "conv2d_i8")]
    if not variant.endswith("stock"):  # every layer: 3 linear, or 2 conv and 1 linear
        assert len(products) == 3
    steps = [s for s in report.steps if s.template in ("qgemm", "qconv")]
    assert len(steps) == len(products)
    assert {s.template for s in steps} == {"qgemm" if p.op == "matmul_i8" else "qconv"
                                           for p in products}
    written = {compiled.graph[s.value].op for s in report.steps
               if s.template not in ("qgemm", "qconv")}  # which may requantize: quantize
    assert not written & {"quantize", "dequantize", "matmul_i8", "conv2d_i8", "mul"}, \
        "no step computes a part of an int8 layer alone"


@pytest.mark.parametrize("batch", [1, 7, 64])
def test_quantized_digits_match_the_reference_executor(quantized_digits, batch):
    d, compiled, _ = quantized_digits
    x = d.x_test[:batch]
    got, ref = compiled(x), cuvil.run(compiled.graph, x)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))


def test_quantized_digits_keep_their_accuracy(quantized_digits):
    from cuvil.zoo import digits

    d, compiled, _ = quantized_digits
    assert digits.accuracy(compiled, d.x_test, d.y_test) >= d.accuracy - 0.003
