"""The f32 products of the zoo, each way Cuvil can compute them, beside ONNX Runtime's.

    .venv/bin/python bench/products.py [--quick] [--shapes 64x784x512,1x784x512]

Per shape M x K x N, on the threads torch uses (two here), in one process and alternating
(`models.block_times`): OpenBLAS in row blocks (`blas._blas`) and with the split Cuvil
uses (`blas._blas_split`: column blocks below COLUMN_SPLIT_ROWS rows), the register tile on
`b` itself (`sgemm`) and on packed panels (`sgemm_panels`), what a compiled model runs for
a constant weight (`blas.gemm_weight`), and ONNX Runtime's MatMul with the weight as an
initializer (its session call costs ~13 us here; the column `ort - call` takes off the
time of an Identity session on the same input). Microseconds, then `gemm_weight / ORT`.
These figures set `COLUMN_SPLIT_ROWS` and `PANEL_MAX_ROWS` (docs/performance.md, "Kernels").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from models import block_times  # noqa: E402

from cuvil.targets.cpu.kernels import blas, blas_threads  # noqa: E402
from cuvil.targets.cpu.kernels.sgemm import sgemm, sgemm_panels  # noqa: E402
from cuvil.targets.cpu.templates.gemm import GEMV_MAX_ROWS, panels  # noqa: E402

SHAPES = ["1x784x512", "64x784x512", "64x512x512", "64x512x10", "16x512x512",
          "256x128x128", "256x128x512", "197x192x576", "512x768x2304", "1024x256x768"]


def ort_session(graph_nodes, inputs, outputs, initializers):
    import onnxruntime as ort
    from onnx import helper

    graph = helper.make_graph(graph_nodes, "g", inputs, outputs, initializers)
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    return ort.InferenceSession(helper.make_model(graph).SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def ort_calls(a: np.ndarray, w: np.ndarray) -> dict:
    """ONNX Runtime's MatMul by `w` and an Identity of `a`, as callables."""
    from onnx import TensorProto, helper, numpy_helper

    def info(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))

    out = (a.shape[0], w.shape[1])
    matmul = ort_session([helper.make_node("MatMul", ["a", "w"], ["c"])], [info("a", a.shape)],
                         [info("c", out)], [numpy_helper.from_array(w, "w")])
    identity = ort_session([helper.make_node("Identity", ["a"], ["c"])], [info("a", a.shape)],
                           [info("c", a.shape)], [])
    return {"ort": lambda: matmul.run(None, {"a": a}),
            "ort_call": lambda: identity.run(None, {"a": a})}


def row(shape: str, seconds: float) -> list:
    m, k, n = (int(d) for d in shape.split("x"))
    rng = np.random.default_rng(0)
    a, w = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n)))
    packed, c, parts = panels(w), np.empty((m, n), np.float32), torch.get_num_threads()
    fns = {"blas_rows": lambda: blas._blas(a, w, c, parts),
           "blas_split": lambda: blas._blas_split(a, w, c, parts),
           "tile": lambda: sgemm(a, w, c, parts),
           "tile_panels": lambda: sgemm_panels(a, packed, c, parts, blas.PANEL_MAX_ROWS + 1),
           "gemm_weight": lambda: blas.gemm_weight(a, w, packed, c, parts, GEMV_MAX_ROWS),
           **ort_calls(a, w)}
    t = {name: s * 1e6 for name, s in block_times(fns, seconds).items()}
    ort = t["ort"] - t["ort_call"]
    return [shape, *(f"{t[name]:.1f}" for name in list(fns)[:5]), f"{ort:.1f}",
            f"{t['gemm_weight'] / ort:.2f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    args = parser.parse_args()
    blas_threads.single_threaded_blas()
    header = ["M x K x N", "blas rows", "blas split", "tile", "tile panels", "gemm_weight",
              "ort - call", "x ort"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for shape in args.shapes.split(","):
        print("| " + " | ".join(row(shape, 1.0 if args.quick else 3.0)) + " |", flush=True)


if __name__ == "__main__":
    main()
