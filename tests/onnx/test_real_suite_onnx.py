"""The library models of `bench/real_suite.py` (torchvision, timm, transformers, LSTM/GRU),
written by `torch.onnx.export`, import from their `.onnx` file and match ONNX Runtime on
the same file at the suite's larger batch, and compiled (optimizer and Numba kernels) match
it too. All are exported with a symbolic batch (`STATIC` would name any that needs a static
one). The way out too: each optimized by Cuvil and written by `to_onnx` passes the full
ONNX checker and runs in ORT as eager does."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("torchvision")
pytest.importorskip("timm")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from onnx_models import ort_run  # noqa: E402

import cuvil  # noqa: E402
from bench.real_suite import build, first_tensor  # noqa: E402
from cuvil.onnx import from_onnx, to_onnx  # noqa: E402

pytestmark = pytest.mark.slow  # each model exports and compiles in 15-60 s on two cores
TOL = 1e-4
TORCHSCRIPT = ["resnet18", "mobilenet_v3_small", "efficientnet_b0", "regnet_x_400mf",
               "convnext_atto", "deit_tiny", "t5_encoder", "whisper_encoder", "lstm",
               "gru"]
# the TorchScript exporter cannot call BertModel with positional inputs; GPT-2's and Llama's
# mask code at a symbolic batch is Range, CumSum and GatherND over values of that size
DYNAMO = ["bert", "gpt2", "llama"]
STATIC: list[str] = []  # exported at a static batch (where mask code all folds at import)
# compiled only in the heavy run (`-m heavy`, tests/conftest.py): each adds 20-40 s on two
# cores, and the default run compiles a model of each kind
HEAVY = ["mobilenet_v3_small", "regnet_x_400mf", "convnext_atto", "deit_tiny", "llama"]


def export(name: str, directory: Path) -> tuple[Path, tuple[torch.Tensor, ...]]:
    model, small, big = build(name)
    path = directory / f"{name}.onnx"
    names = [f"x{i}" for i in range(len(small))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name in DYNAMO + STATIC:  # from the larger batch: torch.export specializes 1
            batch = torch.export.Dim("batch")
            dynamic = None if name in STATIC else tuple({0: batch} for _ in big)
            torch.onnx.export(model, big, str(path), dynamo=True, input_names=names,
                              dynamic_shapes=dynamic)
        else:
            torch.onnx.export(model, small, str(path), dynamo=False, opset_version=17,
                              input_names=names, dynamic_axes={n: {0: "batch"} for n in names})
    return path, big


def _match(got, want: list[np.ndarray]) -> None:
    got = got if isinstance(got, tuple | list) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(np.asarray(g), w, atol=TOL * scale, rtol=TOL)


@pytest.mark.parametrize("name", TORCHSCRIPT + DYNAMO + STATIC)
def test_real_model_from_onnx_imports_and_matches_ort(name, tmp_path):
    """The imported graph, run by the reference semantics, computes ORT's results."""
    path, inputs = export(name, tmp_path)
    graph = from_onnx(path)
    assert "torch_op" not in graph.ops()
    _match(cuvil.run(graph, *inputs), ort_run(path, *inputs))


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.heavy if n in HEAVY else ())
                                  for n in TORCHSCRIPT + DYNAMO + STATIC])
def test_real_model_from_onnx_compiles_and_matches_ort(name, tmp_path):
    """The imported graph compiled (optimizer, then Numba kernels) computes ORT's results."""
    path, inputs = export(name, tmp_path)
    _match(cuvil.compile(str(path))(*inputs), ort_run(path, *inputs))


@pytest.mark.parametrize("name", TORCHSCRIPT + DYNAMO + STATIC)
def test_real_model_exported_by_cuvil_runs_in_ort_as_eager(name, tmp_path):
    """`cuvil.optimize` from batch 1, `to_onnx`, the full checker, then ORT at the larger
    batch against eager, relative to the output's own size (some are far below 1)."""
    model, small, big = build(name)
    path = tmp_path / f"{name}.onnx"
    to_onnx(cuvil.optimize(model, small), path)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    with torch.no_grad():
        want = first_tensor(model(*big)).numpy()
    got = ort_run(path, *big)[0]
    np.testing.assert_allclose(got, want, atol=TOL * float(np.abs(want).max()), rtol=TOL)
