"""The layout and device model: tags are physical only; elementwise ops and spatial ops
keep their input's layout, shape-changing ops take the default one, conversions set it."""

from __future__ import annotations

import pytest
import torch

from cuvil.errors import ShapeError
from cuvil.ir import Graph, TensorType
from cuvil.ops import registry

NHWC = TensorType((2, 3, 4, 5), "f32", "NHWC")


def infer(op, types, **attrs):
    return registry.infer(op, types, registry.get(op).complete_attrs(attrs))


def test_rank_4_values_default_to_nchw_others_to_contiguous():
    assert TensorType((2, 3, 4, 5), "f32").layout == "NCHW"
    assert TensorType((2, 3), "f32").layout == "contiguous"


@pytest.mark.parametrize("op, others", [("relu", []), ("gelu", []),
                                        ("add", [TensorType((5,), "f32")]),
                                        ("mul", [TensorType((2, 3, 4, 5), "f32")])])
def test_elementwise_ops_keep_their_input_layout(op, others):
    assert infer(op, [NHWC, *others]).layout == "NHWC"


def test_spatial_ops_keep_their_input_layout():
    w = TensorType((6, 3, 3, 3), "f32")
    assert infer("conv2d", [NHWC, w], padding=(1, 1)).layout == "NHWC"
    assert infer("max_pool2d", [NHWC], kernel_size=(2, 2)).layout == "NHWC"
    params = [TensorType((3,), "f32")] * 4
    assert infer("batch_norm", [NHWC, *params]).layout == "NHWC"


@pytest.mark.parametrize("op, attrs", [("reshape", {"shape": (2, 3, 20, 1)}),
                                       ("permute", {"dims": (0, 2, 3, 1)}),
                                       ("transpose", {"dim0": 1, "dim1": 3}),
                                       ("view", {"shape": (6, 20)})])
def test_shape_changing_ops_take_the_default_layout(op, attrs):
    out = infer(op, [NHWC], **attrs)
    assert out.layout == ("NCHW" if out.rank == 4 else "contiguous")


def test_to_layout_is_the_logical_identity():
    g = Graph()
    x = g.input("x", TensorType((2, 3, 4, 5), "f32"))
    y = g.add("to_layout", [x], {"layout": "NHWC"})
    g.set_outputs(g.add("to_layout", [y], {"layout": "NCHW"}))
    assert g[y].type == NHWC
    x_ = torch.randn(2, 3, 4, 5)
    from cuvil.ops.execute import run

    assert torch.equal(run(g.verify(), x_), x_)


def test_to_layout_rejects_a_4d_layout_on_another_rank():
    with pytest.raises(ShapeError, match="needs a rank-4 value"):
        infer("to_layout", [TensorType((2, 3), "f32")], layout="NHWC")


def test_device_tags_travel_and_must_agree():
    cuda = infer("to_device", [TensorType((2, 3), "f32")], device="cuda")
    assert cuda.device == "cuda" and infer("relu", [cuda]).device == "cuda"
    assert "@cuda" in str(cuda) and TensorType.parse(str(cuda)) == cuda
    with pytest.raises(ShapeError, match="different devices"):
        infer("add", [cuda, TensorType((2, 3), "f32")])
