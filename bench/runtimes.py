"""The ONNX runtimes Cuvil is compared with: ONNX Runtime and OpenVINO, from one export.

`exported(model, inputs)` is the model as `torch.onnx.export(dynamo=True)` writes it (ONNX
bytes); `build_ort` and `build_openvino` make a callable of those bytes for the CPU. Each
is called as a PyTorch user calls a model: torch tensors in, torch tensors out (the call
includes `x.numpy()` and `torch.from_numpy`, a few microseconds). OpenVINO runs in f32
(`INFERENCE_PRECISION_HINT`): on a CPU with AVX-512 BF16 or AMX its default is bf16, which
would compare a lower precision with everyone else's f32. Both take `threads`, the size of
their intra-op pool (each runtime's own default when None).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import torch

Run = Callable[[], list[torch.Tensor]]


def exported(model, inputs: tuple) -> bytes:
    """The ONNX bytes of `model` traced at `inputs` (torch's dynamo exporter)."""
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, inputs, dynamo=True, verbose=False)
    return program.model_proto.SerializeToString()


def build_ort(model, inputs: tuple, threads: int | None = None,
              onnx: bytes | None = None) -> tuple[Run, float]:
    """ONNX Runtime's CPU session of the model, called once; and the seconds it took to
    export (unless `onnx` is given), make the session and make that first call."""
    import onnxruntime as ort

    t0 = time.perf_counter()
    onnx = onnx if onnx is not None else exported(model, inputs)
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    session = ort.InferenceSession(onnx, options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def run() -> list[torch.Tensor]:
        feeds = {n: x.numpy() for n, x in zip(names, inputs, strict=True)}
        return [torch.from_numpy(o) for o in session.run(None, feeds)]

    run()
    return run, time.perf_counter() - t0


def build_openvino(model, inputs: tuple, threads: int | None = None,
                   onnx: bytes | None = None) -> tuple[Run, float]:
    """OpenVINO's CPU plugin on the model in f32, latency mode, called once; and the seconds
    it took to export (unless `onnx` is given), compile and make that first call."""
    import openvino as ov

    t0 = time.perf_counter()
    onnx = onnx if onnx is not None else exported(model, inputs)
    core = ov.Core()
    config = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
    if threads:
        config["INFERENCE_NUM_THREADS"] = threads
    compiled = core.compile_model(core.read_model(onnx, b""), "CPU", config)
    request = compiled.create_infer_request()

    def run() -> list[torch.Tensor]:
        result = request.infer([x.numpy() for x in inputs])
        return [torch.from_numpy(result[o].copy()) for o in compiled.outputs]

    run()
    return run, time.perf_counter() - t0

