"""`cuvil.onnx` imports what `torch.onnx.export` writes for the zoo (its HuggingFace models
too): each model's ONNX file imports (its dim_param `batch` a symbolic dim), compiles, and
matches ONNX Runtime on the same file, at a batch other than the exported one."""

from __future__ import annotations

import numpy as np
import pytest
import sympy
import torch

import cuvil
from cuvil.onnx import from_onnx, read_model

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx_models import export_zoo, ort_run  # noqa: E402

ZOO = ["mlp", "mlp_gelu", "cnn", "resnet", "mobilenet", "gpt2", "vit", "mixer", "axpy",
       "transformer"]
SMALL = {"mlp": {"width": 64}, "mlp_gelu": {"width": 64}, "cnn": {"size": 16},
         "resnet": {"size": 8, "channels": 16}, "mobilenet": {"size": 8},
         "gpt2": {"seq": 16, "d_model": 64}, "vit": {"size": 16, "dim": 32},
         "mixer": {"tokens": 16, "dim": 32}, "transformer": {"seq": 16, "d_model": 64,
                                                             "ff": 128}}


# the zoo's HuggingFace models (token ids in); GPT-2's export takes 30 s, its compile 20 s
HUGGINGFACE = [pytest.param("hf_gpt2", marks=pytest.mark.heavy), "hf_bert"]


def _at_batch(inputs: tuple[torch.Tensor, ...], batch: int) -> tuple[torch.Tensor, ...]:
    """Inputs like `inputs` at `batch`: normal floats, token ids below the zoo's vocabulary."""
    from cuvil.zoo.huggingface import VOCAB

    torch.manual_seed(1)
    return tuple(torch.randn(batch, *x.shape[1:], dtype=x.dtype) if x.is_floating_point()
                 else torch.randint(0, VOCAB, (batch, *x.shape[1:]), dtype=x.dtype)
                 for x in inputs)


@pytest.mark.slow  # each model compiles in 5-60 s on two shared cores
@pytest.mark.parametrize("name", ZOO + HUGGINGFACE)
def test_zoo_model_compiles_from_onnx_and_matches_ort(name, tmp_path):
    if name.startswith("hf_"):
        pytest.importorskip("transformers")
    path, inputs = export_zoo(name, tmp_path, batch=2, **SMALL.get(name, {}))
    graph = from_onnx(path)
    assert "torch_op" not in graph.ops()
    assert graph.type_of(graph.inputs[0]).shape[0] == sympy.Symbol("batch", integer=True,
                                                                       positive=True)
    xs = _at_batch(inputs, 3)
    want = ort_run(path, *xs)
    got = cuvil.compile(str(path))(*xs)
    got = got if isinstance(got, tuple | list) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), w, atol=1e-4, rtol=1e-4)


def test_a_model_proto_and_optimize(tmp_path):
    path, inputs = export_zoo("mlp", tmp_path, batch=2, width=32)
    proto = read_model(path)
    want = ort_run(path, *inputs)[0]
    np.testing.assert_allclose(cuvil.compile(proto)(*inputs).numpy(), want, atol=1e-4)
    best = cuvil.optimize(path)
    assert best.report is not None
    np.testing.assert_allclose(cuvil.run(best, *inputs).numpy(), want, atol=1e-4)


def test_initializers_are_constants_held_by_reference(tmp_path):
    path, _ = export_zoo("mlp", tmp_path, batch=2, width=32)
    graph = from_onnx(path)
    weights = {init.name for init in read_model(path).graph.initializer}
    refs = {n.attrs["ref"] for n in graph if n.op == "const"}
    assert refs and all(r in weights or r.startswith("folded.") for r in refs)
    assert graph.import_report.dynamic_dims == {"batch": "x0 dim 0"}
