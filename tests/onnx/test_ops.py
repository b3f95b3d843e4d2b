"""Each mapped ONNX op, in a tiny model built with `onnx.helper`, computes what ONNX Runtime
computes on the same model (the graph run by Cuvil's reference semantics). Covers the ops
and attribute forms the zoo exports do not: both opsets' axes, bounds as inputs, shape
arithmetic on a symbolic batch, embedding lookups."""

from __future__ import annotations

import numpy as np
import pytest

import cuvil
from cuvil.onnx import from_onnx

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from onnx_models import const, ort_run, tensor, tiny  # noqa: E402

F = np.float32
X = np.random.default_rng(0).standard_normal((3, 4, 6, 6)).astype(F)
M = np.random.default_rng(1).standard_normal((3, 5, 8)).astype(F)


def node(op, inputs, **attrs):
    return helper.make_node(op, inputs, ["y"], name=op.lower(), **attrs)


def check(nodes, x, inits=(), opset=17, out=None, x_shape=None):
    """The model's output equals ORT's; the input's dim 0 is the symbolic `batch`."""
    shape = x_shape or ["batch", *x.shape[1:]]
    dtype = TensorProto.INT64 if x.dtype == np.int64 else TensorProto.FLOAT
    model = tiny(nodes, [tensor("x", shape, dtype)], [tensor("y", out)], inits, opset)
    want = ort_run(model, x)[0]
    got = cuvil.run(from_onnx(model), x)
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5, rtol=1e-5)


CASES = {
    "softmax": ([node("Softmax", ["x"], axis=1)], X, ()),
    "log_softmax": ([node("LogSoftmax", ["x"])], M, ()),
    "reduce_mean_attr": ([node("ReduceMean", ["x"], axes=[2, 3], keepdims=1)], X, ()),
    "reduce_sum_input": ([node("ReduceSum", ["x", "ax"], keepdims=0)], X, [const("ax", [1])]),
    "reduce_max_18": ([node("ReduceMax", ["x", "ax"])], M, [const("ax", [-1])], 18),
    "clip_inputs": ([node("Clip", ["x", "lo", "hi"])], X, [const("lo", F(-0.5)),
                                                           const("hi", F(0.7))]),
    "clip_relu6": ([node("Clip", ["x", "lo", "hi"])], X * 5, [const("lo", F(0)),
                                                              const("hi", F(6))]),
    "hardsigmoid": ([node("HardSigmoid", ["x"], alpha=0.3, beta=0.4)], X, ()),
    "hardswish": ([node("HardSwish", ["x"])], X * 4, ()),
    "leaky_relu": ([node("LeakyRelu", ["x"], alpha=0.1)], X, ()),
    "transpose_perm": ([node("Transpose", ["x"], perm=[0, 2, 3, 1])], X, ()),
    "transpose_swap": ([node("Transpose", ["x"], perm=[0, 2, 1])], M, ()),
    "flatten_axis2": ([node("Flatten", ["x"], axis=2)], X, ()),
    "slice_steps": ([node("Slice", ["x", "s", "e", "a", "st"])], X,
                    [const("s", [1, -5]), const("e", [2**63 - 1, -1]), const("a", [1, 3]),
                     const("st", [2, 1])]),
    "gather_index": ([node("Gather", ["x", "i"], axis=1)], M, [const("i", np.int64(-2))]),
    "unsqueeze_squeeze": ([helper.make_node("Unsqueeze", ["x", "a"], ["h"]),
                           node("Squeeze", ["h", "a"])], M, [const("a", [0, -1])]),
    "squeeze_all": ([node("Squeeze", ["x"])], M[:, :1, :, None], ()),
    "expand": ([node("Expand", ["x", "s"])], M[:, :1], [const("s", [2, 1, 1, 8])]),
    "concat_weight": ([node("Concat", ["x", "w"], axis=0)], M, [const("w", np.ones((2, 5, 8),
                                                                                   F))]),
    "where_cast": ([helper.make_node("Greater", ["x", "z"], ["c"]),
                    helper.make_node("Cast", ["c"], ["f"], to=TensorProto.FLOAT),
                    node("Where", ["c", "x", "f"])], X, [const("z", F(0.1))]),
    "gemm_alpha_beta": ([node("Gemm", ["x", "w", "c"], alpha=0.5, beta=2.0, transB=1)],
                        M[0], [const("w", np.ones((3, 8), F)), const("c", np.arange(3.0,
                                                                                     dtype=F))]),
    "batch_norm": ([node("BatchNormalization", ["x", "s", "b", "m", "v"], epsilon=1e-3)], X,
                   [const("s", np.linspace(0.5, 2, 4, dtype=F)), const("b", np.ones(4, F)),
                    const("m", np.full(4, 0.1, F)), const("v", np.linspace(1, 3, 4, dtype=F))]),
    "avg_pool": ([node("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2],
                       pads=[1, 1, 1, 1])], X, ()),
    "conv1d": ([node("Conv", ["x", "w", "b"], strides=[2], pads=[1, 1], dilations=[1])], M,
               [const("w", np.random.default_rng(3).standard_normal((4, 5, 3)).astype(F)),
                const("b", np.arange(4.0, dtype=F))]),
    "conv2d_groups": ([node("Conv", ["x", "w"], group=2, pads=[1, 1, 1, 1])], X,
                      [const("w", np.random.default_rng(4).standard_normal((6, 2, 3, 3))
                             .astype(F))]),
    "isnan": ([helper.make_node("IsNaN", ["x"], ["n"]), node("Where", ["n", "z", "x"])],
              np.where(X > 1, np.nan, X).astype(F), [const("z", F(0))]),
    "resize_scales": ([node("Resize", ["x", "", "sc"], mode="nearest")], X,
                      [const("sc", np.array([1, 1, 2, 3], F))]),
    "resize_sizes": ([node("Resize", ["x", "", "", "sz"], mode="nearest",
                           coordinate_transformation_mode="half_pixel")], X[:1],
                     [const("sz", [1, 4, 12, 12])], 17, None, [1, 4, 6, 6]),
    "max_pool": ([node("MaxPool", ["x"], kernel_shape=[2, 2], strides=[2, 2])], X, ()),
    "global_max_pool": ([node("GlobalMaxPool", ["x"])], X, ()),
    "layer_norm_no_bias": ([node("LayerNormalization", ["x", "s"], axis=-1)], M,
                           [const("s", np.linspace(0.5, 1.5, 8, dtype=F))]),
}


@pytest.mark.parametrize("case", CASES)
def test_op_matches_ort(case):
    nodes, x, inits, *rest = CASES[case]
    check(nodes, x, inits, *rest)


def test_split_outputs():
    nodes = [helper.make_node("Split", ["x", "s"], ["a", "b"], axis=2),
             helper.make_node("Sub", ["a", "b"], ["y"])]
    check(nodes, M, [const("s", [4, 4])])


def test_embedding_and_shape_arithmetic_on_a_symbolic_batch():
    """Token ids into a weight, reshaped by a target shape computed from `Shape` of the
    input (batch unknown at import): the chain folds at import, the batch stays symbolic."""
    nodes = [helper.make_node("Gather", ["w", "x"], ["e"]),
             helper.make_node("Shape", ["x"], ["sh"]),
             helper.make_node("Gather", ["sh", "zero"], ["n"]),
             helper.make_node("Unsqueeze", ["n", "axis0"], ["n1"]),
             helper.make_node("Concat", ["n1", "rest"], ["target"], axis=0),
             helper.make_node("Reshape", ["e", "target"], ["y"])]
    inits = [const("w", np.random.default_rng(2).standard_normal((10, 4)).astype(F)),
             const("zero", np.int64(0)), const("axis0", [0]), const("rest", [-1])]
    ids = np.array([[1, 2, 3], [9, 0, 4]], dtype=np.int64)
    check(nodes, ids, inits)
    graph = from_onnx(tiny(nodes, [tensor("x", ["batch", 3], TensorProto.INT64)],
                           [tensor("y", None)], inits))
    assert graph.ops() == ["embedding", "reshape"]
    assert str(graph.type_of(graph.outputs[0])) == "f32[batch,12]"


def test_equal_and_where_on_a_symbolic_shape_fold():
    """The exporters' `Expand` to a shape with -1 holes (timm's cls token): `Equal(shape,
    -1)` on a shape holding the symbolic batch folds (a batch is never -1)."""
    nodes = [helper.make_node("Shape", ["x"], ["sh"]),
             helper.make_node("Equal", ["sh", "neg"], ["hole"]),
             helper.make_node("Where", ["hole", "ones", "sh"], ["target"]),
             helper.make_node("Expand", ["t", "target"], ["e"]),
             node("Add", ["x", "e"])]
    inits = [const("neg", [-1, -1, -1]), const("ones", [1, 1, 1]),
             const("t", np.arange(8.0, dtype=F).reshape(1, 1, 8))]
    check(nodes, M, inits)


def test_constant_of_shape_on_a_symbolic_batch():
    nodes = [helper.make_node("Shape", ["x"], ["sh"]),
             helper.make_node("ConstantOfShape", ["sh"], ["ones"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.5])),
             node("Add", ["x", "ones"])]
    check(nodes, M)


def test_linear_resize_is_refused():
    model = tiny([node("Resize", ["x", "", "sc"], mode="linear")],
                 [tensor("x", [1, 1, 2, 2])], [tensor("y", None)],
                 [const("sc", np.array([1, 1, 2, 2], F))])
    with pytest.raises(cuvil.CuvilError, match=r"^ONNX node 'resize' \(Resize, opset 17\): "
                                               "linear resizing$"):
        from_onnx(model)
