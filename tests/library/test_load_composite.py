"""Composite ops loaded from `op` items: their type follows from the body through the
catalog, their reference implementation computes what torch computes for the body, their
work is the body's, and a graph using them runs."""

from __future__ import annotations

import pickle

import pytest
import torch
import torch.nn.functional as F

import cuvil
from cuvil.errors import ShapeError
from cuvil.ir.graph import Graph
from cuvil.ir.types import DType, TensorType, sym
from cuvil.library import load
from cuvil.ops import registry

OPS = """
op linear(x, w, b) = add(matmul(x, w), b) kernel gemm
op linear_relu(x, w, b) = relu(linear(x, w, b))
op softmax_scaled(x, s, d) = softmax(mul(x, s), dim=d)
op shifted_half(x) = mul(add(x, 1), 0.5)
"""


@pytest.fixture(scope="module")
def ops():
    return load(OPS).ops


def test_signature_from_the_body(ops):
    assert ops["linear"].inputs == ("x", "w", "b") and ops["linear"].attrs == ()
    assert ops["softmax_scaled"].inputs == ("x", "s")
    (d,) = ops["softmax_scaled"].attrs
    assert (d.name, d.kind, d.required) == ("d", "int", True)
    assert {op.kind for op in ops.values()} == {registry.COMPOSITE}
    assert ops["linear"].body.name == "linear" and ops["linear"].body.body.op == "add"


def test_kernel_family_comes_from_the_kernel_clause(ops):
    assert ops["linear"].kernel == "gemm" and ops["linear"].body.kernel == "gemm"
    assert ops["linear_relu"].kernel == ""  # lowered as its parts


def test_type_follows_the_body_including_symbolic_dims(ops):
    batch = sym("batch")
    x, w, b = TensorType((batch, 3), "f32"), TensorType((3, 4), "f32"), TensorType((4,), "f32")
    out = registry.infer("linear_relu", [x, w, b], {}, defs=ops)
    assert out == TensorType((batch, 4), DType.f32)
    with pytest.raises(ShapeError, match="matmul"):
        registry.infer("linear", [x, TensorType((5, 4), "f32"), b], {}, defs=ops)
    half = registry.infer("shifted_half", [TensorType((2,), "i64")], {}, defs=ops)
    assert half.dtype == DType.f32  # i64 + 1 stays i64; * 0.5 promotes, as torch does


def test_reference_matches_torch_on_the_same_computation(ops):
    torch.manual_seed(0)
    x, w, b = torch.randn(5, 3), torch.randn(3, 4), torch.randn(4)
    torch.testing.assert_close(ops["linear"].ref([x, w, b], {}), F.linear(x, w.T, b))
    torch.testing.assert_close(ops["linear_relu"].ref([x, w, b], {}),
                               torch.relu(F.linear(x, w.T, b)))
    s = torch.tensor(0.25)
    torch.testing.assert_close(ops["softmax_scaled"].ref([x, s], {"d": 0}),
                               torch.softmax(x * 0.25, dim=0))
    n = torch.arange(4)
    torch.testing.assert_close(ops["shifted_half"].ref([n], {}), (n + 1) * 0.5)


def test_work_is_the_sum_of_the_body(ops):
    x, w, b = TensorType((2, 3), "f32"), TensorType((3, 4), "f32"), TensorType((4,), "f32")
    out = TensorType((2, 4), "f32")
    matmul = registry.flops("matmul", [x, w], out, {})
    add = registry.flops("add", [out, b], out, {})
    assert registry.flops("linear", [x, w, b], out, {}, defs=ops) == matmul + add == 56
    relu = registry.flops("relu", [out], out, {})
    assert registry.flops("linear_relu", [x, w, b], out, {}, defs=ops) == matmul + add + relu


def test_a_graph_using_composite_ops_runs(ops):
    graph = Graph("g")
    graph.defs = dict(ops)
    x = graph.input("x", TensorType((sym("n"), 3), "f32"))
    weight, bias = torch.randn(3, 4), torch.randn(4)
    y = graph.add("linear_relu", [x, graph.const(weight), graph.const(bias)])
    graph.set_outputs(y)
    assert graph[y].type == TensorType((sym("n"), 4), "f32")
    inp = torch.randn(6, 3)
    expected = torch.relu(inp @ weight + bias)
    torch.testing.assert_close(cuvil.run(graph, inp), expected)


def test_composite_ops_pickle(ops):
    copy = pickle.loads(pickle.dumps(ops["linear_relu"]))
    x, w, b = torch.randn(2, 3), torch.randn(3, 4), torch.randn(4)
    torch.testing.assert_close(copy.ref([x, w, b], {}), torch.relu(x @ w + b))
    assert copy.body.body == ops["linear_relu"].body.body
