"""`cuvil.onnx.to_onnx` writes an optimized graph that ONNX Runtime runs as eager does: each
zoo model (its HuggingFace GPT-2 and BERT too), optimized (its fused ops expanded from
their `.cvr` definitions), passes the full ONNX checker and matches torch eager within 1e-4
at a batch other than the example's, with ONNX Runtime's contrib ops (FusedConv, BiasGelu)
and with standard ops only; symbolic dims are dim_params; an op with no ONNX form is a
one-line error."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import cuvil
from cuvil import zoo
from cuvil.errors import CuvilError
from cuvil.ir import Graph
from cuvil.ir.types import DType, TensorType, sym
from cuvil.onnx import to_onnx

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

MS = "com.microsoft"
ZOO = ["mlp", "mlp_gelu", "cnn", "resnet", "mobilenet", "gpt2", "vit", "mixer", "axpy",
       "transformer", "hf_gpt2", "hf_bert"]
SMALL = {"mlp": {"width": 64}, "mlp_gelu": {"width": 64}, "cnn": {"size": 16},
         "resnet": {"size": 8, "channels": 16}, "mobilenet": {"size": 8},
         "gpt2": {"seq": 16, "d_model": 64}, "vit": {"size": 16, "dim": 32},
         "mixer": {"tokens": 16, "dim": 32},
         "transformer": {"seq": 16, "d_model": 64, "ff": 128}}


def ort_run(path, inputs) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs, strict=True)}
    return session.run(None, feeds)


def _at_batch(inputs: tuple[torch.Tensor, ...], batch: int) -> tuple[torch.Tensor, ...]:
    """Inputs like `inputs` at `batch`: normal floats, token ids below the zoo's vocabulary."""
    from cuvil.zoo.huggingface import VOCAB

    torch.manual_seed(1)
    return tuple(torch.randn(batch, *x.shape[1:], dtype=x.dtype) if x.is_floating_point()
                 else torch.randint(0, VOCAB, (batch, *x.shape[1:]), dtype=x.dtype)
                 for x in inputs)


@pytest.mark.parametrize("name", ZOO)
def test_zoo_model_exports_and_runs_in_ort_as_eager(name, tmp_path):
    """GPT-2's mask code (`arange`, `cumsum`, `diff`, `index`) and BERT's are exported too."""
    if name.startswith("hf_"):
        pytest.importorskip("transformers")
    model, inputs = zoo.get(name, **SMALL.get(name, {}))
    graph = cuvil.optimize(model, inputs)
    x = _at_batch(inputs, 3)
    with torch.no_grad():
        want = model(*x)
    for contrib in (True, False):
        path = tmp_path / f"{name}_{contrib}.onnx"
        proto = to_onnx(graph, path, contrib=contrib)
        onnx.checker.check_model(onnx.load(str(path)), full_check=True)
        domains = {n.domain for n in proto.graph.node}
        assert domains <= ({"", MS} if contrib else {""})
        assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
        (got,) = ort_run(path, x)
        np.testing.assert_allclose(got, want.numpy(), atol=1e-4, rtol=1e-4)
    assert {p.suffix for p in tmp_path.iterdir()} == {".onnx"}  # no temporary file left


@pytest.mark.parametrize("name, op, contrib_op", [
    ("resnet", "conv2d_bias_add_relu", "FusedConv"),
    ("cnn", "conv2d_bias_relu", "FusedConv"),
    ("mlp_gelu", "linear_gelu", "BiasGelu"),
])
def test_fused_op_becomes_ort_contrib_op(name, op, contrib_op):
    model, inputs = zoo.get(name, **SMALL[name])
    graph = cuvil.optimize(model, inputs)
    assert op in graph.ops()
    proto = to_onnx(graph)
    nodes = proto.graph.node
    assert contrib_op in {n.op_type for n in nodes if n.domain == MS}
    read = {name for n in nodes for name in n.input}  # the bias reshaped, its original dropped
    assert {t.name for t in proto.graph.initializer} <= read
    assert contrib_op not in {n.op_type for n in to_onnx(graph, contrib=False).graph.node}


def test_fused_op_is_written_as_its_definition():
    model, inputs = zoo.get("mlp", width=64)
    graph = cuvil.optimize(model, inputs)
    assert set(graph.ops()) <= set(graph.defs), "every op a fused one"
    ops = [n.op_type for n in to_onnx(graph, contrib=False).graph.node]
    assert sorted(set(ops)) == ["Add", "MatMul", "Relu"] and ops.count("MatMul") == 3


def _graph(op: str, attrs: dict) -> Graph:
    g = Graph("g")
    x = g.input("x", TensorType((sym("n"), 4), DType.f32))
    g.set_outputs(g.add(op, [x], attrs))
    return g


def test_an_op_without_onnx_form_is_a_one_line_error_naming_node_and_op():
    g = _graph("qweight", {"axis": -1})
    with pytest.raises(CuvilError) as e:
        to_onnx(g)
    message = str(e.value)
    assert "\n" not in message and "qweight" in message and g.outputs[0] in message


def test_a_layout_conversion_is_an_identity_and_symbolic_reshape_runs(tmp_path):
    g = Graph("g")
    x = g.input("x", TensorType((sym("n"), 3, 4, 5), DType.f32))
    y = g.add("to_layout", [x], {"layout": "NHWC"})
    g.set_outputs(g.add("reshape", [g.add("relu", [y])], {"shape": (sym("n") * 3, 20)}))
    to_onnx(g, tmp_path / "g.onnx")
    onnx.checker.check_model(onnx.load(str(tmp_path / "g.onnx")), full_check=True)
    a = torch.randn(2, 3, 4, 5)
    (got,) = ort_run(tmp_path / "g.onnx", (a,))
    np.testing.assert_allclose(got, a.relu().reshape(6, 20).numpy())


@pytest.mark.parametrize("op, attrs, ref", [
    ("clamp", {"min": -0.5, "max": None}, lambda a: a.clamp(min=-0.5)),
    ("hardsigmoid", {}, torch.nn.functional.hardsigmoid),
    ("silu", {}, torch.nn.functional.silu),
    ("rsqrt", {}, lambda a: a.abs().rsqrt()),
    ("amax", {"dim": (1,), "keepdim": True}, lambda a: a.amax(1, keepdim=True)),
    ("log_softmax", {"dim": -1}, lambda a: a.log_softmax(-1)),
])
def test_unary_ops_match_torch(op, attrs, ref, tmp_path):
    g = _graph(op, attrs)
    to_onnx(g, tmp_path / "g.onnx")
    a = torch.randn(5, 4)
    a = a.abs() if op == "rsqrt" else a
    (got,) = ort_run(tmp_path / "g.onnx", (a,))
    np.testing.assert_allclose(got, ref(a).numpy(), atol=1e-5, rtol=1e-5)


def test_causal_attention_matches_torch(tmp_path):
    g = Graph("g")
    t = TensorType((sym("n"), 2, 6, 8), DType.f32)
    q, k, v = (g.input(n, t) for n in "qkv")
    g.set_outputs(g.add("scaled_dot_product_attention", [q, k, v], {"is_causal": True}))
    to_onnx(g, tmp_path / "g.onnx")
    xs = tuple(torch.randn(3, 2, 6, 8) for _ in range(3))
    (got,) = ort_run(tmp_path / "g.onnx", xs)
    want = torch.nn.functional.scaled_dot_product_attention(*xs, is_causal=True)
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5, rtol=1e-5)
