"""`cuvil import MODEL`: prints the IR and the import report; bad specs are one line on
stderr and exit 1, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from cuvil.cli import main
from cuvil.ir import Graph


def cuvil(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_import_a_zoo_model_prints_ir_that_parses(capsys):
    code, out, err = cuvil(capsys, "import", "zoo:mlp")
    assert code == 0 and err == ""
    ir, report = out.split("}\n", 1)
    graph = Graph.from_text(ir + "}\n")
    assert graph.name == "MLP" and graph.ops().count("matmul") == 3
    assert "symbolic dims: batch (x dim 0)" in report


def test_static_flag(capsys):
    code, out, _ = cuvil(capsys, "import", "zoo:mlp", "--static")
    assert code == 0 and "batch" not in out.split("}\n")[0]
    assert "static shapes" in out


def test_factory_spec_and_fallback_report(capsys):
    code, out, _ = cuvil(capsys, "import", "cli_import_models:cumprod_model")
    assert code == 0 and 'torch_op(x, target="aten.cumprod.default"' in out
    assert "1 op(s) without a catalog entry" in out


def test_strict_flag_fails_on_a_fallback(capsys):
    code, out, err = cuvil(capsys, "import", "cli_import_models:cumprod_model", "--strict")
    assert code == 1 and out == ""
    assert err.startswith("cuvil: error: 1 unsupported op(s): aten.cumprod.default at ")
    assert err.count("\n") == 1


def test_pt2_file(capsys, tmp_path):
    from cli_import_models import cumprod_model

    model, inputs = cumprod_model()
    path = tmp_path / "cumprod.pt2"
    torch.export.save(torch.export.export(model, inputs), path)
    code, out, _ = cuvil(capsys, "import", str(path))
    assert code == 0 and out.startswith("graph cumprod(x: f32[2,4])")


@pytest.mark.parametrize("spec, message", [
    ("resnet", "cannot load model 'resnet': expected zoo:NAME, a .pt2 or .onnx file"),
    ("zoo:resnet50", "no zoo model 'resnet50'"),
    ("nothing/here.pt2", "nothing/here.pt2: no such file"),
    ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
    ("cli_import_models:missing", "has no function 'missing'"),
    ("cli_import_models:not_a_pair", "must return (model, example_inputs)"),
    ("cli_import_models:broken", "broken() failed: ValueError: no weights here"),
])
def test_bad_specs_are_one_line_errors(capsys, spec, message):
    code, out, err = cuvil(capsys, "import", spec)
    assert code == 1 and out == ""
    assert err.startswith("cuvil: error: ") and message in err and err.count("\n") == 1


def test_the_command_line_prints_no_traceback():
    result = subprocess.run([sys.executable, "-m", "cuvil", "import", "zoo:nothing"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("cuvil: error: no zoo model 'nothing'")


FACTORY = '''
import torch

def model():
    return torch.nn.ReLU(), (torch.randn(2, 3),)
'''


def test_factory_from_a_file_path(capsys, tmp_path):
    (tmp_path / "my_model.py").write_text(FACTORY)
    code, out, err = cuvil(capsys, "import", f"{tmp_path}/my_model.py:model")
    assert code == 0 and err == "" and "= relu(input)" in out


def test_factory_module_in_the_current_directory(capsys, tmp_path, monkeypatch):
    (tmp_path / "here_model_xyz.py").write_text(FACTORY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    code, out, err = cuvil(capsys, "import", "here_model_xyz:model")
    assert code == 0 and err == "" and "= relu(input)" in out


@pytest.mark.parametrize("text, message", [
    ("def model(:\n", "importing"),
    ("raise RuntimeError('boom')\n", "RuntimeError: boom"),
])
def test_a_broken_factory_file_is_one_line(capsys, tmp_path, text, message):
    (tmp_path / "bad.py").write_text(text)
    code, out, err = cuvil(capsys, "import", f"{tmp_path}/bad.py:model")
    assert code == 1 and out == "" and message in err and err.count("\n") == 1


def test_a_missing_factory_file_is_one_line(capsys, tmp_path):
    code, _, err = cuvil(capsys, "import", f"{tmp_path}/none.py:model")
    assert code == 1 and "no such file" in err and err.count("\n") == 1
