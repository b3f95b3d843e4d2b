"""The GPU check: cuvil's CUDA target against torch eager and torch.compile on an H200.

    .venv/bin/python bench/gpu.py [--models mlp64,cnn] [--real resnet18,bert]
                                  [--kernels "gemm 1024"] [--seconds 1]
                                  [--elements 67108864] [--budget 180]

Without a CUDA GPU it prints one line and exits (status 0): nothing here runs on the CPU.

1. The zoo, per case: torch eager on cuda, torch.compile on cuda, and cuvil compiled for
   `"cuda"` (every op on the GPU) and for `["cuda", "cpu"]` (the stock placement rules
   choose what runs on the GPU). Cuvil takes and returns host tensors, so its time
   includes moving the inputs and results over the link; torch's does not (its inputs
   already live on the GPU): the table says both, and the placement (kernels per target,
   transfers, nodes run on the CPU instead).
   Then the library models of `bench/real_suite.py` named by `--real`, the same way, at
   batch 1.
2. The CUDA kernels one by one (`KERNELS`: GEMM, convolution, pooling, attention), each
   launched on device arrays (no transfers) against the same torch op on the GPU.
3. Fused elementwise bandwidth: `tanh(relu(x) * 2 + 1)` over `--elements` f32 as one cuvil
   CUDA kernel, in GB/s (bytes read + written), against a device-to-device copy
   (numba.cuda) and torch's `copy_` (~4.3 TB/s measured on an H200).

Every result is checked against torch eager on the CPU (max abs error in the table). The
zoo cases stop being started once `--budget` seconds have passed (default 180), so the
whole run stays under five minutes on an H200; the table says which were skipped.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES = {  # label -> (zoo model, sizes)
    "mlp64": ("mlp", {"batch": 64}),
    "mlp_gelu": ("mlp_gelu", {}),
    "cnn": ("cnn", {}),
    "transformer": ("transformer", {}),
    "gpt2": ("gpt2", {}),
    "mobilenet": ("mobilenet", {}),
}


def gpu_or_exit() -> None:
    """Exit with one line unless both torch and numba.cuda see a GPU."""
    import torch

    if not torch.cuda.is_available():
        print("bench/gpu.py: no CUDA GPU here (torch.cuda.is_available() is False); "
              "nothing measured")
        sys.exit(0)
    from numba import cuda

    if not cuda.is_available():
        print("bench/gpu.py: torch sees a GPU but numba.cuda does not; nothing measured")
        sys.exit(0)


def timed(fn: Callable[[], object], seconds: float, sync: Callable[[], None]) -> float:
    """Median seconds per call of `fn` (synchronized), after three untimed calls."""
    for _ in range(3):
        fn()
    sync()
    samples, end = [], time.perf_counter() + seconds
    while True:
        t0 = time.perf_counter()
        fn()
        sync()
        t1 = time.perf_counter()
        samples.append(t1 - t0)
        if t1 > end and len(samples) >= 5:
            return statistics.median(samples)


def max_error(got, want) -> float:
    import torch

    got = got if isinstance(got, torch.Tensor) else got[0]
    want = want if isinstance(want, torch.Tensor) else want[0]
    return float((got.detach().float().cpu() - want.detach().float().cpu()).abs().max())


def zoo_case(label: str, seconds: float) -> dict[str, object]:
    """One row of a zoo model (see `model_row`)."""
    from cuvil import zoo

    name, sizes = CASES[label]
    model, inputs = zoo.get(name, **sizes)
    return model_row(label, model.eval(), inputs, seconds)


def real_case(name: str, seconds: float) -> dict[str, object]:
    """One row of a library model of `bench/real_suite.py`, at batch 1 (see `model_row`)."""
    from bench.real_suite import build

    model, inputs, _ = build(name)
    return model_row(name, model, inputs, seconds)


def model_row(label: str, model, inputs: tuple, seconds: float) -> dict[str, object]:
    """Eager, torch.compile and cuvil (`"cuda"`, `["cuda", "cpu"]`) latencies, errors
    against eager on the CPU, cuvil's placement."""
    import torch

    import cuvil
    from bench.real_suite import first_tensor

    with torch.no_grad():
        reference = first_tensor(model(*inputs))
    gpu_model = model.to("cuda")
    gpu_inputs = tuple(x.to("cuda") for x in inputs)
    sync = torch.cuda.synchronize
    row: dict[str, object] = {"case": label}
    with torch.no_grad():
        row["eager ms"] = 1e3 * timed(lambda: gpu_model(*gpu_inputs), seconds, sync)
        compiled_torch = torch.compile(gpu_model)
        t0 = time.perf_counter()
        compiled_torch(*gpu_inputs)
        row["torch.compile s"] = time.perf_counter() - t0
        row["torch.compile ms"] = 1e3 * timed(lambda: compiled_torch(*gpu_inputs), seconds, sync)
    model.to("cpu")
    for name, target in (("cuda", "cuda"), ("cuda+cpu", ["cuda", "cpu"])):
        t0 = time.perf_counter()
        fast = cuvil.compile(model, inputs, target=target, cache=False,
                             fallback_policy="cpu")
        row[f"cuvil {name} compile s"] = time.perf_counter() - t0
        row[f"cuvil {name} ms"] = 1e3 * timed(functools.partial(fast, *inputs), seconds, sync)
        row[f"cuvil {name} err"] = max_error(first_tensor(fast(*inputs)), reference)
        row[f"{name} placement"] = fast.report.placement_summary()
    return row


KERNELS = {  # label -> (op, input shapes, attrs): one CUDA kernel each
    "gemm 1024": ("matmul", [(1024, 1024), (1024, 1024)], {}),
    "conv 3x3 64ch": ("conv2d", [(8, 64, 56, 56), (64, 64, 3, 3)],
                      {"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "groups": 1}),
    "depthwise 3x3": ("conv2d", [(8, 128, 56, 56), (128, 1, 3, 3)],
                      {"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1],
                       "groups": 128}),
    "maxpool 3x3/2": ("max_pool2d", [(8, 64, 112, 112)],
                      {"kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1],
                       "dilation": [1, 1], "ceil_mode": False}),
    "adaptive avg": ("adaptive_avg_pool2d", [(32, 512, 7, 7)], {"output_size": [1, 1]}),
    "sdpa 8x8x256x64": ("scaled_dot_product_attention", [(8, 8, 256, 64)] * 3,
                        {"is_causal": False, "scale": None}),
}


def kernel_case(label: str, seconds: float) -> dict[str, object]:
    """One CUDA kernel on device arrays against torch's op on the GPU, and its error."""
    import numpy as np
    import torch
    from numba import cuda

    import cuvil
    from cuvil.ir import Graph, TensorType
    from cuvil.runtime import compile_graph

    op, shapes, attrs = KERNELS[label]
    g = Graph(label.replace(" ", "_"))
    xs = [g.add("to_device", [g.input(f"x{i}", TensorType(s, "f32"))], {"device": "cuda"})
          for i, s in enumerate(shapes)]
    g.set_outputs(g.add("to_device", [g.add(op, xs, attrs)], {"device": "cpu"}))
    compiled = compile_graph(g, target=["cuda", "cpu"])
    [kernel] = [k for k in compiled.report.kernels if k.template != "transfer"]
    launch = compiled._entry.__globals__[kernel.name]
    gen = torch.Generator().manual_seed(0)
    host = [torch.randn(*s, generator=gen) for s in shapes]
    want = cuvil.run(g, *host)
    args = [cuda.to_device(x.numpy()) for x in host]
    out = cuda.device_array(tuple(want.shape), np.float32)
    fused = timed(lambda: launch(*args, out), seconds, cuda.synchronize)
    dev = [x.cuda() for x in host]
    reference = torch_op(op, attrs)
    torch_s = timed(lambda: reference(*dev), seconds, torch.cuda.synchronize)
    error = float((torch.from_numpy(out.copy_to_host()) - want).abs().max())
    return {"kernel": label, "template": kernel.template, "cuvil ms": 1e3 * fused,
            "torch ms": 1e3 * torch_s, "err": error}


def torch_op(op: str, attrs: dict) -> Callable:
    """torch's op on GPU tensors, from the op catalog's reference implementation."""
    from cuvil.ops import registry

    ref = registry.get(op).ref
    return lambda *xs: ref(list(xs), attrs)


def elementwise_bandwidth(n: int, seconds: float) -> dict[str, float]:
    """GB/s of one fused cuvil CUDA kernel, of a numba device copy and of torch's copy_."""
    import numpy as np
    import torch
    from numba import cuda

    import cuvil  # noqa: F401  (the op catalog types the graph)
    from cuvil.ir import Graph, TensorType
    from cuvil.runtime import compile_graph

    g = Graph("fused_elementwise")
    x = g.add("to_device", [g.input("x", TensorType((n,), "f32"))], {"device": "cuda"})
    y = g.add("add", [g.add("mul", [g.add("relu", [x]), g.scalar(2.0)]), g.scalar(1.0)])
    y = g.add("tanh", [y])
    g.set_outputs(g.add("to_device", [y], {"device": "cpu"}))
    compiled = compile_graph(g, target=["cuda", "cpu"])
    kernel = next(k.name for k in compiled.report.kernels if k.template == "elementwise")
    launch = compiled._entry.__globals__[kernel]
    host = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    src, dst = cuda.to_device(host), cuda.device_array(n, np.float32)
    moved = 2 * 4 * n  # bytes read + written
    fused = timed(lambda: launch(src, dst), seconds, cuda.synchronize)
    copy = timed(lambda: dst.copy_to_device(src), seconds, cuda.synchronize)
    tx, ty = torch.from_numpy(host).cuda(), torch.empty(n, device="cuda")
    torch_copy = timed(lambda: ty.copy_(tx), seconds, torch.cuda.synchronize)
    want = torch.tanh(torch.relu(torch.from_numpy(host)) * 2 + 1)
    error = float((torch.from_numpy(dst.copy_to_host()) - want).abs().max())
    return {"fused GB/s": moved / fused / 1e9, "numba copy GB/s": moved / copy / 1e9,
            "torch copy GB/s": moved / torch_copy / 1e9, "fused err": error}


def print_table(rows: list[dict[str, object]]) -> None:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    print(" | ".join(keys))
    for r in rows:
        cells = [f"{r[k]:.3g}" if isinstance(r.get(k), float) else str(r.get(k, "")) for k in keys]
        print(" | ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(CASES))
    parser.add_argument("--real", default="resnet18,bert,lstm",
                        help="bench/real_suite.py models, after the zoo ('' for none)")
    parser.add_argument("--seconds", type=float, default=1.0, help="timing per system")
    parser.add_argument("--elements", type=int, default=1 << 26)
    parser.add_argument("--kernels", default=",".join(KERNELS))
    parser.add_argument("--budget", type=float, default=180.0,
                        help="seconds after which no further zoo case starts")
    args = parser.parse_args()
    gpu_or_exit()
    import torch

    print(f"GPU: {torch.cuda.get_device_name()}")
    start = time.perf_counter()
    kernels = [guarded(kernel_case, "kernel", k, args.seconds / 2)
               for k in args.kernels.split(",") if k]
    print_table(kernels)
    print()
    print_table([elementwise_bandwidth(args.elements, args.seconds)])
    print()
    rows = []
    cases = [(zoo_case, m) for m in args.models.split(",") if m]
    cases += [(real_case, m) for m in args.real.split(",") if m]
    for case, label in cases:
        if time.perf_counter() - start > args.budget:
            rows.append({"case": label, "error": f"skipped: past --budget {args.budget:g} s"})
            continue
        rows.append(guarded(case, "case", label, args.seconds))
        print_table(rows[-1:])
    print()
    print_table(rows)


def guarded(fn: Callable, key: str, label: str, seconds: float) -> dict[str, object]:
    """`fn(label, seconds)`, or a row saying what went wrong: one failing case must not
    hide the others."""
    try:
        return fn(label, seconds)
    except Exception as e:
        return {key: label, "error": f"{type(e).__name__}: {e}".splitlines()[0]}


if __name__ == "__main__":
    main()
