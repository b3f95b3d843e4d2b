"""ONNX CumSum (forward and reverse) and GatherND (with and without batch_dims), in tiny
models built with `onnx.helper`, import onto the catalog's `cumsum` and `index` and compute
what ONNX Runtime computes on the same model (the graph run by Cuvil's reference semantics,
and a reverse CumSum and a batched GatherND compiled too), on a symbolic batch; a form not
mapped is a one-line error. Range up to a symbolic limit imports as `arange`."""

from __future__ import annotations

import numpy as np
import pytest

import cuvil
from cuvil.errors import CuvilError
from cuvil.onnx import from_onnx

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx_models import const, ort_run, tensor, tiny  # noqa: E402

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4, 5)).astype(np.float32)
INTS = RNG.integers(-5, 5, (3, 6)).astype(np.int64)
Y = RNG.standard_normal((3, 4, 5)).astype(np.float32)  # GatherND's data: [batch, 4, 5]


def run_both(nodes, x, inits=(), elem=TensorProto.FLOAT):
    model = tiny(nodes, [tensor("x", ["batch", *x.shape[1:]], elem)],
                 [tensor("y", None, elem)], inits, opset=17)
    want = ort_run(model, x)[0]
    graph = from_onnx(model)
    got = np.asarray(cuvil.run(graph, x))
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    return graph


@pytest.mark.parametrize("x, axis, exclusive, reverse", [
    (X, 1, 0, 0), (X, -1, 0, 0), (X, 2, 1, 0), (INTS, 1, 0, 0), (INTS, 1, 1, 0),
    (X, 1, 0, 1), (X, -1, 1, 1), (X, 0, 0, 1),  # reverse, along the symbolic batch too
    (INTS, 1, 0, 1), (INTS, 0, 1, 1)])
def test_cumsum_matches_ort(x, axis, exclusive, reverse):
    elem = TensorProto.INT64 if x.dtype == np.int64 else TensorProto.FLOAT
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive,
                              reverse=reverse)]
    graph = run_both(nodes, x, [const("axis", np.array(axis, np.int64))], elem)
    assert "cumsum" in graph.ops()


def test_cumsum_reverse_compiles_and_matches_ort():
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=1, reverse=1)]
    model = tiny(nodes, [tensor("x", ["batch", 4, 5])], [tensor("y", None)],
                 [const("axis", np.array(0, np.int64))])
    want = ort_run(model, X)[0]
    got = cuvil.compile(model)(X)
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5, rtol=1e-5)


def test_cumsum_axis_computed_at_run_time_is_a_one_line_error():
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["y"])]
    model = tiny(nodes, [tensor("x", ["batch", 4, 5]), tensor("axis", [], TensorProto.INT64)],
                 [tensor("y", None)])
    with pytest.raises(CuvilError, match="CumSum.*axis") as err:
        from_onnx(model)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("indices", [
    [[0, 1], [2, 3], [1, 0]],            # two of three dims: rows of the last dim
    [[[2]], [[0]]],                      # one dim, indices of rank 3
    [[0, 3, 4], [1, -1, -2]],            # every dim (scalars), negative indices
])
def test_gather_nd_matches_ort(indices):
    nodes = [helper.make_node("GatherND", ["x", "i"], ["y"])]
    graph = run_both(nodes, X, [const("i", np.array(indices, np.int64))])
    assert "index" in graph.ops()


def test_gather_nd_with_run_time_indices_on_a_symbolic_batch():
    """GPT-2's form: the indices are a run-time value (here the input, [batch, 2])."""
    model = tiny([helper.make_node("GatherND", ["data", "x"], ["y"])],
                 [tensor("x", ["batch", 2], TensorProto.INT64)], [tensor("y", None)],
                 [const("data", X)])
    indices = np.array([[0, 1], [2, 3], [1, -1], [0, 0]], np.int64)
    want = ort_run(model, indices)[0]
    np.testing.assert_allclose(np.asarray(cuvil.run(from_onnx(model), indices)), want)


def _batched_gather_nd(batch_dims: int, indices_shape: list) -> onnx.ModelProto:
    """GatherND(data, x) with run-time indices x whose first dim is the symbolic batch."""
    return tiny([helper.make_node("GatherND", ["data", "x"], ["y"], batch_dims=batch_dims)],
                [tensor("x", ["batch", *indices_shape], TensorProto.INT64)],
                [tensor("y", None)], [const("data", Y)])


@pytest.mark.parametrize("batch_dims, indices", [
    (1, [[1], [3], [0]]),                                  # a row per batch entry
    (1, [[[0, 4], [2, -1]], [[3, 3], [1, 0]], [[0, 0], [-4, 2]]]),  # points, two a batch
    (2, [[[2], [0], [4], [1]]] * 3),                       # an element per (batch, row)
])
def test_gather_nd_with_batch_dims_matches_ort(batch_dims, indices):
    indices = np.array(indices, np.int64)
    model = _batched_gather_nd(batch_dims, list(indices.shape[1:]))
    want = ort_run(model, indices)[0]
    graph = from_onnx(model)
    assert "index" in graph.ops()
    np.testing.assert_allclose(np.asarray(cuvil.run(graph, indices)), want)


def test_gather_nd_with_batch_dims_compiles_and_matches_ort():
    indices = np.array([[[0, 4], [2, -1]], [[3, 3], [1, 0]], [[0, 0], [-4, 2]]], np.int64)
    model = _batched_gather_nd(1, [2, 2])
    want = ort_run(model, indices)[0]
    np.testing.assert_allclose(np.asarray(cuvil.compile(model)(indices)), want)


def test_gather_nd_with_more_indices_than_dims_is_a_one_line_error():
    nodes = [helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=1)]
    model = tiny(nodes, [tensor("x", ["batch", 4, 5])], [tensor("y", None)],
                 [const("i", np.zeros((3, 3), np.int64))])
    with pytest.raises(CuvilError, match="GatherND.*rank") as err:
        from_onnx(model)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("start", [0, 2])
def test_range_to_a_symbolic_limit_matches_ort(start):
    """GPT-2's form: Range(start, batch, 1), added to the input so that it is an output."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
             helper.make_node("Squeeze", ["s"], ["n"]),
             helper.make_node("Add", ["n", "start"], ["limit"]),
             helper.make_node("Range", ["start", "limit", "one"], ["r"]),
             helper.make_node("Unsqueeze", ["r", "ax1"], ["r1"]),
             helper.make_node("Add", ["x", "r1"], ["y"])]
    inits = [const("start", np.array(start, np.int64)), const("one", np.array(1, np.int64)),
             const("ax1", np.array([1], np.int64))]
    graph = run_both(nodes, INTS, inits, TensorProto.INT64)
    assert "arange" in graph.ops()
