"""`cuvil import model.onnx`: prints the IR of an ONNX file and its import report; an
unreadable or unsupported file is one line on stderr and exit 1, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cuvil.cli import main
from cuvil.ir import Graph

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402


def _model(op: str = "Relu"):
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], name="act")], "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_import_an_onnx_file_prints_ir_that_parses(capsys, tmp_path):
    path = tmp_path / "tiny.onnx"
    path.write_bytes(_model().SerializeToString())
    assert main(["import", str(path)]) == 0
    out, err = capsys.readouterr()
    ir, report = out.split("}\n", 1)
    graph = Graph.from_text(ir + "}\n")
    assert graph.ops() == ["relu"] and err == ""
    assert "symbolic dims: n (x dim 0)" in report


@pytest.mark.parametrize("content, message", [
    (lambda: _model().SerializeToString()[:-5], "not a readable ONNX file (truncated"),
    (lambda: _model("NoSuchOp").SerializeToString(), "ONNX node 'act' (NoSuchOp, opset 17) "
                                                     "has no Cuvil mapping"),
])
def test_a_bad_file_is_one_line(capsys, tmp_path, content, message):
    path = tmp_path / "bad.onnx"
    path.write_bytes(content())
    assert main(["import", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("cuvil: error: ") and err.count("\n") == 1
    assert message in err


def test_a_missing_file_without_traceback(tmp_path):
    path = tmp_path / "missing.onnx"
    result = subprocess.run([sys.executable, "-m", "cuvil", "import", str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr == f"cuvil: error: {path}: no such file\n"


def test_a_truncated_file_without_traceback(tmp_path):
    path = tmp_path / "cut.onnx"
    path.write_bytes(_model().SerializeToString()[:-5])
    result = subprocess.run([sys.executable, "-m", "cuvil", "import", str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "not a readable ONNX file" in result.stderr
