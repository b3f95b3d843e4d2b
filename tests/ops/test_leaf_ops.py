"""The ops property tests do not draw: scalars, and `torch_op`, the escape hatch."""

from __future__ import annotations

import pytest
import torch

from cuvil.errors import CuvilError
from cuvil.ir import DType, Graph, TensorType
from cuvil.ops.execute import run


@pytest.mark.parametrize("value, dtype", [(0.5, "f32"), (3, "i64"), (True, "bool"),
                                          (2.0, "f16")])
def test_scalar_is_a_weak_0d_tensor_of_its_dtype(value, dtype):
    g = Graph()
    s = g.scalar(value, dtype=DType.f16 if dtype == "f16" else None)
    assert g[s].type == TensorType((), dtype, weak=True)
    g.set_outputs(s)
    out = run(g)
    assert out.dim() == 0 and out.item() == value and str(out.dtype) == {
        "f32": "torch.float32", "i64": "torch.int64", "bool": "torch.bool",
        "f16": "torch.float16"}[dtype]


def test_torch_op_runs_its_target_with_the_argument_template():
    g = Graph()
    x = g.input("x", TensorType((3, 4), "f32"))
    y = g.add("torch_op", [x], {"target": "aten.cumsum.default", "args": ("$0", 1),
                                "out": "f32[3,4]"})
    values, indices = (g.add("torch_op", [x], {"target": "aten.sort.default",
                                               "args": ("$0",), "kwargs": (("dim", 0),),
                                               "index": i, "out": t})
                       for i, t in ((0, "f32[3,4]"), (1, "i64[3,4]")))
    g.set_outputs((y, values, indices))
    assert g[indices].type == TensorType((3, 4), "i64")
    x_ = torch.randn(3, 4)
    got = run(g.verify(), x_)
    want = torch.sort(x_, dim=0)
    assert torch.equal(got[0], torch.cumsum(x_, 1))
    assert torch.equal(got[1], want.values) and torch.equal(got[2], want.indices)


def test_torch_op_with_an_unknown_target_is_a_clear_error():
    g = Graph()
    x = g.input("x", TensorType((3,), "f32"))
    g.set_outputs(g.add("torch_op", [x], {"target": "aten.no_such_op.default",
                                          "args": ("$0",), "out": "f32[3]"}))
    with pytest.raises(CuvilError, match="no torch op 'aten.no_such_op.default'"):
        run(g, torch.randn(3))
