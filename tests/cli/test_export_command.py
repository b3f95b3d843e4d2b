"""`cuvil export MODEL -o FILE`: writes the optimized model as an ONNX file that ONNX
Runtime runs as eager does (`--no-contrib`: standard ops only); a bad MODEL is one line on
stderr and exit 1, no file."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cuvil import zoo
from cuvil.cli import main

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def test_export_writes_an_onnx_file_that_runs_as_eager(capsys, tmp_path):
    path = tmp_path / "mlp.onnx"
    assert main(["export", "zoo:mlp", "-o", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"{path}: ") and "ONNX nodes" in out
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    model, (x,) = zoo.get("mlp")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("spec, message", [
    ("zoo:nosuch", "no zoo model 'nosuch'"),
    ("missing.onnx", "missing.onnx: no such file"),
])
def test_a_bad_model_is_one_line_and_exit_1(spec, message, capsys, tmp_path):
    path = tmp_path / "out.onnx"
    assert main(["export", spec, "-o", str(path)]) == 1
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert not path.exists()


def test_output_is_required(capsys):
    with pytest.raises(SystemExit) as e:
        main(["export", "zoo:mlp"])
    assert e.value.code == 2


@pytest.mark.parametrize("flags, domains", [([], {"", "com.microsoft"}), (["--no-contrib"], {""})])
def test_no_contrib_writes_standard_ops_only(flags, domains, tmp_path):
    path = tmp_path / "m.onnx"
    assert main(["export", "zoo:mlp_gelu", "-o", str(path), *flags]) == 0
    assert {n.domain for n in onnx.load(str(path)).graph.node} == domains
