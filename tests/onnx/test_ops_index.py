"""ONNX CumSum and GatherND (batch_dims=0), in tiny models built with `onnx.helper`,
import onto the catalog's `cumsum` and `index` and compute what ONNX Runtime computes on
the same model (the graph run by Cuvil's reference semantics), on a symbolic batch; the
forms not mapped (CumSum reverse, GatherND batch_dims) are one-line errors. Range up to a
symbolic limit imports as `arange`."""

from __future__ import annotations

import numpy as np
import pytest

import cuvil
from cuvil.errors import CuvilError
from cuvil.onnx import from_onnx

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from onnx_models import const, ort_run, tensor, tiny  # noqa: E402

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4, 5)).astype(np.float32)
INTS = RNG.integers(-5, 5, (3, 6)).astype(np.int64)


def run_both(nodes, x, inits=(), elem=TensorProto.FLOAT):
    model = tiny(nodes, [tensor("x", ["batch", *x.shape[1:]], elem)],
                 [tensor("y", None, elem)], inits, opset=17)
    want = ort_run(model, x)[0]
    graph = from_onnx(model)
    got = np.asarray(cuvil.run(graph, x))
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    return graph


@pytest.mark.parametrize("x, axis, exclusive", [(X, 1, 0), (X, -1, 0), (X, 2, 1),
                                                 (INTS, 1, 0), (INTS, 1, 1)])
def test_cumsum_matches_ort(x, axis, exclusive):
    elem = TensorProto.INT64 if x.dtype == np.int64 else TensorProto.FLOAT
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive)]
    graph = run_both(nodes, x, [const("axis", np.array(axis, np.int64))], elem)
    assert "cumsum" in graph.ops()


def test_cumsum_reverse_is_a_one_line_error():
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["y"], reverse=1)]
    model = tiny(nodes, [tensor("x", ["batch", 4, 5])], [tensor("y", None)],
                 [const("axis", np.array(1, np.int64))])
    with pytest.raises(CuvilError, match="CumSum.*reverse") as err:
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


def test_gather_nd_batch_dims_is_a_one_line_error():
    nodes = [helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=1)]
    model = tiny(nodes, [tensor("x", ["batch", 4, 5])], [tensor("y", None)],
                 [const("i", np.zeros((3, 1), np.int64))])
    with pytest.raises(CuvilError, match="GatherND.*batch_dims") as err:
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
