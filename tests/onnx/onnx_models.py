"""ONNX files for the tests: zoo models written by `torch.onnx.export` with a dynamic batch,
tiny models built with `onnx.helper`, and ONNX Runtime's results on a file."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper

from cuvil import zoo

# nn.TransformerEncoderLayer's attention and GPT-2's aten::diff (in its mask code) do not go
# through the TorchScript exporter
DYNAMO = {"transformer", "hf_gpt2"}


def export_zoo(name: str, directory: Path, **sizes) -> tuple[Path, tuple[torch.Tensor, ...]]:
    """The zoo model `name` as `<directory>/<name>.onnx` (dim 0 of each input is `batch`)."""
    model, inputs = zoo.get(name, **sizes)
    path = directory / f"{name}.onnx"
    names = [f"x{i}" for i in range(len(inputs))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name in DYNAMO:
            batch = torch.export.Dim("batch")
            torch.onnx.export(model, inputs, str(path), dynamo=True, input_names=names,
                              dynamic_shapes=tuple({0: batch} for _ in inputs))
        else:
            torch.onnx.export(model, inputs, str(path), dynamo=False, opset_version=17,
                              input_names=names,
                              dynamic_axes={n: {0: "batch"} for n in names})
    return path, inputs


def ort_run(model: Path | onnx.ModelProto, *inputs) -> list[np.ndarray]:
    import onnxruntime as ort

    data = str(model) if isinstance(model, Path) else model.SerializeToString()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    feeds = {i.name: np.asarray(x) for i, x in zip(session.get_inputs(), inputs, strict=True)}
    return session.run(None, feeds)


def tiny(nodes: list, inputs: list, outputs: list, initializers: list = (),
         opset: int = 17) -> onnx.ModelProto:
    """A one-graph model of `nodes` at `opset` (default domain)."""
    graph = helper.make_graph(nodes, "tiny", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def tensor(name: str, shape: list, dtype: int = TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def const(name: str, value) -> TensorProto:
    return onnx.numpy_helper.from_array(np.asarray(value), name)
