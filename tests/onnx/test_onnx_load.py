"""Unreadable and unsupported ONNX models are one-line `CuvilError`s that name the place: a
truncated or malformed file, a missing one, an opset older than Cuvil reads, an op with no
mapping (its node, op type and opset), a custom domain."""

from __future__ import annotations

import numpy as np
import pytest

import cuvil
from cuvil.errors import CuvilError
from cuvil.onnx import MIN_OPSET, from_onnx

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from onnx_models import tensor, tiny  # noqa: E402


def _relu_model(opset: int = 17):
    return tiny([helper.make_node("Relu", ["x"], ["y"], name="act")],
                [tensor("x", ["batch", 4])], [tensor("y", ["batch", 4])], opset=opset)


def _one_line(excinfo) -> str:
    text = str(excinfo.value)
    assert "\n" not in text
    return text


def test_a_truncated_file(tmp_path):
    path = tmp_path / "cut.onnx"
    path.write_bytes(_relu_model().SerializeToString()[:-7])
    with pytest.raises(CuvilError) as e:
        from_onnx(path)
    text = _one_line(e)
    assert text.startswith(f"{path}: not a readable ONNX file (truncated or malformed")


def test_garbage_and_empty_files(tmp_path):
    for data in (b"\xff\xfe not protobuf at all \x00\x01", b""):
        path = tmp_path / "bad.onnx"
        path.write_bytes(data)
        with pytest.raises(CuvilError, match="not a readable ONNX file") as e:
            cuvil.compile(str(path))
        _one_line(e)


def test_a_missing_file(tmp_path):
    with pytest.raises(CuvilError, match="nothere.onnx: no such file"):
        from_onnx(tmp_path / "nothere.onnx")


def test_an_opset_too_old():
    with pytest.raises(CuvilError) as e:
        from_onnx(_relu_model(opset=9))
    assert f"opset 9 is older than Cuvil reads (opset {MIN_OPSET} or later" in _one_line(e)


def test_an_unknown_op_names_node_type_and_opset():
    model = tiny([helper.make_node("Relu", ["x"], ["h"], name="act"),
                  helper.make_node("FrobnicateTensor", ["h"], ["y"], name="mystery")],
                 [tensor("x", [2, 4])], [tensor("y", [2, 4])], opset=17)
    with pytest.raises(CuvilError) as e:
        cuvil.compile(model)
    assert _one_line(e) == ("ONNX node 'mystery' (FrobnicateTensor, opset 17) has no Cuvil "
                            "mapping")


def test_a_custom_domain_op():
    model = tiny([helper.make_node("FusedGemm", ["x"], ["y"], name="f", domain="com.acme")],
                 [tensor("x", [2, 4])], [tensor("y", [2, 4])])
    model.opset_import.append(helper.make_opsetid("com.acme", 1))
    with pytest.raises(CuvilError, match=r"'f' \(FusedGemm, opset 17\) has no Cuvil mapping "
                                         r"\(domain 'com.acme'\)"):
        from_onnx(model)


def test_unmappable_attributes_name_the_node():
    model = tiny([helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2],
                                   pads=[0, 0, 1, 1])],
                 [tensor("x", [1, 1, 4, 4])], [tensor("y", [1, 1, 4, 4])])
    with pytest.raises(CuvilError) as e:
        from_onnx(model)
    assert _one_line(e).startswith("ONNX node 'pool' (MaxPool, opset 17): asymmetric pads")


def test_not_an_onnx_model():
    with pytest.raises(CuvilError, match="cannot read an ONNX model from a int"):
        from_onnx(3)


def test_a_malformed_initializer():
    from onnx import numpy_helper

    weight = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    weight.raw_data = weight.raw_data[:10]  # cut short
    model = tiny([helper.make_node("MatMul", ["x", "w"], ["y"])], [tensor("x", [2, 4])],
                 [tensor("y", [2, 4])], [weight])
    with pytest.raises(CuvilError) as e:
        from_onnx(model)
    assert _one_line(e).startswith("tiny: initializer 'w' is malformed")
