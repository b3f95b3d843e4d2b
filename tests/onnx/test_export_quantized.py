"""Quantized graphs export as the integer ops ONNX Runtime runs (QuantizeLinear,
DequantizeLinear, MatMulInteger, ConvInteger): each passes the full ONNX checker and ONNX
Runtime computes what the graph's reference semantics (torch eager, op by op) compute, on
a batch other than the one it was compiled at. The zoo MLP and CNN are quantized by the
int8 rules; tiny graphs cover the forms those models do not (i8 activations, an i32
quantize, an i32 dequantize with a zero point)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import cuvil
from cuvil import zoo
from cuvil.ir import Graph
from cuvil.ir.types import DType, TensorType, sym
from cuvil.onnx import to_onnx

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

TOL = 1e-4
INTEGER_OPS = {"QuantizeLinear", "DequantizeLinear"}


def exported(graph: Graph, tmp_path) -> tuple[set[str], ort.InferenceSession]:
    path = tmp_path / "g.onnx"
    proto = to_onnx(graph, path)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return {n.op_type for n in proto.graph.node}, session


def run_ort(session, *inputs: torch.Tensor) -> list[np.ndarray]:
    feeds = {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs, strict=True)}
    return session.run(None, feeds)


def _match(got: np.ndarray, want: torch.Tensor) -> None:
    assert got.dtype == want.numpy().dtype
    scale = max(1.0, float(want.abs().max()))
    np.testing.assert_allclose(got, want.numpy(), atol=TOL * scale, rtol=TOL)


@pytest.mark.parametrize("name, sizes, integer_op", [
    ("mlp", {}, "MatMulInteger"),
    ("cnn", {"size": 16}, "ConvInteger"),
])
def test_int8_zoo_model_exports_and_runs_in_ort_as_its_graph(name, sizes, integer_op,
                                                             tmp_path):
    model, inputs = zoo.get(name, **sizes)
    shape = inputs[0].shape[1:]
    torch.manual_seed(0)
    batches = [(torch.randn(128, *shape),) for _ in range(4)]
    graph = cuvil.optimize(model, batches[0], quantize=cuvil.Quantize(calibration=batches))
    assert any(op.startswith("q") for op in graph.ops()), "some layer is int8"
    ops, session = exported(graph, tmp_path)
    assert INTEGER_OPS | {integer_op} <= ops
    x = torch.randn(5, *shape)
    (got,) = run_ort(session, x)
    _match(got, cuvil.run(graph, x))


def _int8_linear(x_dtype: str, x_zero: int) -> Graph:
    """quantize -> matmul_i8 -> dequantize, each intermediate an output too."""
    g = Graph("g")
    x = g.input("x", TensorType((sym("batch"), 16), DType.f32))
    torch.manual_seed(1)
    w = g.const(torch.randint(-127, 128, (16, 8), dtype=torch.int8))
    q = g.add("quantize", [x], {"scale": 0.02, "zero_point": x_zero, "dtype": x_dtype})
    acc = g.add("matmul_i8", [q, w], {"x_zero": x_zero})
    g.set_outputs((q, acc, g.add("dequantize", [acc], {"scale": 0.02 * 0.01})))
    return g


@pytest.mark.parametrize("x_dtype, x_zero", [("u8", 128), ("u8", 0), ("i8", 0), ("i8", -3)])
def test_int8_matmul_matches_its_definition(x_dtype, x_zero, tmp_path):
    g = _int8_linear(x_dtype, x_zero)
    ops, session = exported(g, tmp_path)
    assert {"QuantizeLinear", "MatMulInteger", "DequantizeLinear"} <= ops
    x = torch.randn(6, 16) * 2  # some values saturate
    for got, want in zip(run_ort(session, x), cuvil.run(g, x), strict=True):
        _match(got, want)


@pytest.mark.parametrize("padding, stride, x_zero", [((1, 1), (1, 1), 128), ((0, 2), (2, 1), 7)])
def test_int8_conv_matches_its_definition(padding, stride, x_zero, tmp_path):
    """The padding holds the zero point, as the catalog's conv2d_i8 defines it."""
    g = Graph("g")
    x = g.input("x", TensorType((sym("batch"), 3, 8, 8), DType.u8))
    torch.manual_seed(2)
    w = g.const(torch.randint(-127, 128, (4, 3, 3, 3), dtype=torch.int8))
    g.set_outputs(g.add("conv2d_i8", [x, w], {"stride": stride, "padding": padding,
                                              "dilation": (1, 1), "groups": 1,
                                              "x_zero": x_zero}))
    ops, session = exported(g, tmp_path)
    assert "ConvInteger" in ops
    a = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
    (got,) = run_ort(session, a)
    _match(got, cuvil.run(g, a))


def test_quantize_and_dequantize_outside_the_linear_ops_are_their_definitions(tmp_path):
    """An i32 quantize and an i32 dequantize with a zero point: float ops, same values."""
    g = Graph("g")
    x = g.input("x", TensorType((sym("batch"), 10), DType.f32))
    q = g.add("quantize", [x], {"scale": 0.001, "zero_point": 5, "dtype": "i32"})
    g.set_outputs((q, g.add("dequantize", [q], {"scale": 0.001, "zero_point": 5})))
    ops, session = exported(g, tmp_path)
    assert not ops & INTEGER_OPS
    a = torch.randn(4, 10) * 100
    for got, want in zip(run_ort(session, a), cuvil.run(g, a), strict=True):
        _match(got, want)
