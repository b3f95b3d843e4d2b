"""`index`, `cumsum`, `diff` and `arange` export as Gather / GatherND, CumSum, Slice and
Sub, and Range: each
graph passes the full ONNX checker, and ONNX Runtime computes what torch eager computes on
a batch other than the one the graph was typed with (the batch a symbolic dim)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cuvil.ir import Graph
from cuvil.ir.types import DType, TensorType, sym
from cuvil.onnx import to_onnx

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

N = sym("batch")
TOL = 1e-4


def ort_check_and_run(graph: Graph, tmp_path, *inputs: torch.Tensor) -> list[np.ndarray]:
    path = tmp_path / "g.onnx"
    to_onnx(graph, path)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs, strict=True)}
    return session.run(None, feeds)


def _index_graph(start: int, index_shapes: list[tuple], dtype: DType = DType.i64) -> Graph:
    g = Graph("g")
    x = g.input("x", TensorType((N, 4, 5, 6), DType.f32))
    picks = [g.input(f"i{k}", TensorType(s, dtype)) for k, s in enumerate(index_shapes)]
    g.set_outputs(g.add("index", [x, *picks], {"start": start}))
    return g


@pytest.mark.parametrize("start, index_shapes, dtype", [
    (1, [(3,)], DType.i64),                # one index: Gather on dim 1
    (2, [(2, 3)], DType.i32),              # one i32 index of rank 2
    (0, [(2,), (2,)], DType.i64),          # two paired indices from dim 0
    (1, [(3, 1), (1, 2)], DType.i64),      # two indices that broadcast, from dim 1
    (1, [(2,), (2,), (2,)], DType.i32),    # three i32 indices: every dim after the batch
])
def test_index_matches_torch(start, index_shapes, dtype, tmp_path):
    g = _index_graph(start, index_shapes, dtype)
    x = torch.randn(3, 4, 5, 6)
    sizes = x.shape[start:start + len(index_shapes)]
    gen = torch.Generator().manual_seed(0)
    picks = [torch.randint(-n, n, s, generator=gen).to(dtype.torch)  # negative ones too
             for n, s in zip(sizes, index_shapes, strict=True)]
    (got,) = ort_check_and_run(g, tmp_path, x, *picks)
    want = x[(slice(None),) * start + tuple(p.long() for p in picks)]
    np.testing.assert_allclose(got, want.numpy(), atol=TOL, rtol=TOL)


@pytest.mark.parametrize("dtype, dim", [(DType.f32, 1), (DType.f32, 0), (DType.i64, -1),
                                        (DType.i32, 2), (DType.bool, 1)])
def test_cumsum_matches_torch(dtype, dim, tmp_path):
    """Integers and bools sum in i64, as torch's do; ONNX's CumSum takes no bool."""
    g = Graph("g")
    x = g.input("x", TensorType((N, 4, 5), dtype))
    g.set_outputs(g.add("cumsum", [x], {"dim": dim}))
    a = torch.randn(3, 4, 5) * 100
    a = a > 0 if dtype == DType.bool else a.to(dtype.torch)
    (got,) = ort_check_and_run(g, tmp_path, a)
    want = torch.cumsum(a, dim)
    assert got.dtype == want.numpy().dtype
    np.testing.assert_allclose(got, want.numpy(), atol=TOL, rtol=TOL)


@pytest.mark.parametrize("dtype, dim", [(DType.f32, 1), (DType.f32, -1), (DType.i64, 0),
                                        (DType.bool, 2)])
def test_diff_matches_torch(dtype, dim, tmp_path):
    g = Graph("g")
    x = g.input("x", TensorType((N, 4, 5), dtype))
    g.set_outputs(g.add("diff", [x], {"dim": dim}))
    a = torch.randn(3, 4, 5)
    a = a > 0 if dtype == DType.bool else (a * 10).to(dtype.torch)
    (got,) = ort_check_and_run(g, tmp_path, a)
    np.testing.assert_allclose(got, torch.diff(a, dim=dim).numpy(), atol=TOL, rtol=TOL)


@pytest.mark.parametrize("dtype, start, step", [(DType.i64, 0, 1), (DType.i64, 2, 3),
                                                (DType.i32, -4, 2), (DType.f32, 0.5, 0.25),
                                                (DType.f64, 1.0, -0.1)])
def test_arange_of_a_symbolic_length_matches_torch(dtype, start, step, tmp_path):
    """The length is the input's batch, read at run time; the result is an output."""
    g = Graph("g")
    x = g.input("x", TensorType((N,), dtype))
    ramp = g.add("arange", [], {"shape": (N,), "start": start, "step": step,
                                "dtype": dtype.value})
    g.set_outputs((ramp, g.add("add", [x, ramp])))
    a = torch.ones(7, dtype=dtype.torch)
    got, shifted = ort_check_and_run(g, tmp_path, a)
    want = torch.arange(7, dtype=torch.float64 if dtype.is_float else torch.int64)
    want = (want * step + start).to(dtype.torch)
    assert got.dtype == want.numpy().dtype
    np.testing.assert_allclose(got, want.numpy(), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(shifted, (a + want).numpy(), atol=TOL, rtol=TOL)


def test_arange_of_a_static_length(tmp_path):
    g = Graph("g")
    x = g.input("x", TensorType((N, 5), DType.f32))
    g.set_outputs(g.add("add", [x, g.add("arange", [], {"shape": (5,), "dtype": "f32"})]))
    a = torch.randn(2, 5)
    (got,) = ort_check_and_run(g, tmp_path, a)
    np.testing.assert_allclose(got, (a + torch.arange(5.0)).numpy(), atol=TOL, rtol=TOL)
