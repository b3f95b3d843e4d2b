"""Kernel benchmarks: what the generated kernels reach against the machine's plain limits.

    .venv/bin/python bench/kernel_limits.py [--quick] [--markdown]

* fused elementwise chains, GB/s against a plain copy of the same bytes (numpy and torch);
* GEMM + bias + ReLU epilogue, GFLOP/s against numpy's GEMM alone on the same shapes;
* convolutions in NCHW and NHWC (the layout rules' choice must pay);
* per-call overhead per op against torch eager's dispatch (a chain of tiny ops);
* latency spread of small parallel kernels right after torch ops (thread-pool stalls).

Everything is measured in one process, alternating the contenders in rounds, and printed
as ratios: this machine is shared and absolute numbers move 30-50% between runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from models import block_times  # noqa: E402

from cuvil.ir import Graph, TensorType, sym  # noqa: E402
from cuvil.runtime import compile_graph  # noqa: E402

B = sym("batch")
CACHE = tempfile.mkdtemp(prefix="cuvil-bench-")


def compile_(g: Graph, **options):
    return compile_graph(g, cache_dir=CACHE, **options)


def elementwise_chains(quick: bool) -> list[tuple]:
    return [_chain(n, quick) for n in ([10**6] if quick else [10**6, 10**7])]


def _chain(n: int, quick: bool) -> tuple:
    g = Graph("chain")  # a static size: kernels get a parallel loop when their size calls for it
    a, b, c = (g.input(k, TensorType((n,), "f32")) for k in "abc")
    g.set_outputs(g.add("relu", [g.add("add", [g.add("mul", [a, b]), c])]))
    compiled = compile_(g)
    x, y, z = (torch.rand(n) for _ in range(3))
    src, dst = np.random.rand(2 * n).astype(np.float32), np.empty(2 * n, np.float32)
    tsrc, tdst = torch.from_numpy(src), torch.from_numpy(dst)
    t = block_times({"cuvil": lambda: compiled(x, y, z), "eager": lambda: torch.relu(x * y + z),
                "np_copy": lambda: np.copyto(dst, src), "torch_copy": lambda: tdst.copy_(tsrc)},
               1.5 if quick else 4)
    moved = 4 * n * 4  # three inputs read, one output written; the copy moves as many bytes
    best_copy = min(t["np_copy"], t["torch_copy"])
    return (f"relu(a*b+c), {n:.0e} f32", moved / t["cuvil"] / 1e9, moved / best_copy / 1e9,
            best_copy / t["cuvil"], t["eager"] / t["cuvil"])


def gemm_epilogue(quick: bool) -> list[tuple]:
    shapes = [(1024, 1024, 1024), (1024, 256, 1024)] if quick else \
        [(1024, 1024, 1024), (1024, 256, 1024), (1024, 1024, 256), (64, 784, 512)]
    return [_gemm(m, k, n, quick) for m, k, n in shapes]


def _gemm(m: int, k: int, n: int, quick: bool) -> tuple:
    torch.manual_seed(0)
    w, b = torch.randn(k, n) * 0.05, torch.randn(n)
    g = Graph("linear_relu")
    x = g.input("x", TensorType((B, k), "f32"))
    h = g.add("add", [g.add("matmul", [x, g.const(w, "w")]), g.const(b, "b")])
    g.set_outputs(g.add("relu", [h]))
    compiled = compile_(g)
    xt = torch.randn(m, k)
    xn, wn, out = xt.numpy(), w.numpy(), np.empty((m, n), np.float32)
    t = block_times({"cuvil": lambda: compiled(xt), "numpy_gemm": lambda: np.dot(xn, wn, out),
                "eager": lambda: torch.relu(xt @ w + b)}, 1.5 if quick else 4)
    flops = 2 * m * k * n
    return (f"{m}x{k}x{n} +bias+relu", flops / t["cuvil"] / 1e9, flops / t["numpy_gemm"] / 1e9,
            t["numpy_gemm"] / t["cuvil"], t["eager"] / t["cuvil"])


def conv_layouts(quick: bool) -> list[tuple]:
    """NCHW (3x3 from 32 channels: Winograd) against NHWC (im2col, or one product for 1x1)."""
    return [_conv(label, k, pad, c, quick) for label, k, pad, c in
            [("3x3", 3, 1, 32), ("3x3", 3, 1, 16), ("3x3", 3, 1, 64), ("1x1", 1, 0, 32)]]


def _conv(label: str, k: int, pad: int, c: int, quick: bool) -> tuple:
    torch.manual_seed(0)
    w, bias = torch.randn(c, c, k, k) * 0.1, torch.randn(c, 1, 1)
    compiled = {}
    for layout in ("NCHW", "NHWC"):
        g = Graph(f"conv_{layout}")
        x = g.input("x", TensorType((B, c, 32, 32), "f32", layout))
        h = g.add("conv2d", [x, g.const(w, "w")], {"padding": (pad, pad)})
        g.set_outputs(g.add("relu", [g.add("add", [h, g.const(bias, "b")])]))
        compiled[layout] = compile_(g)
    xt = torch.randn(16, c, 32, 32)
    x_nhwc = xt.permute(0, 2, 3, 1).contiguous()  # the activations already stored NHWC
    conv = torch.nn.Conv2d(c, c, k, padding=pad).eval()
    t = block_times({"NCHW": lambda: compiled["NCHW"](xt),
                "NHWC": lambda: compiled["NHWC"](x_nhwc.permute(0, 3, 1, 2)),
                "eager": lambda: torch.relu(conv(xt))}, 1.5 if quick else 4)
    return (f"conv {label} {c}->{c} on 16x32x32 +bias+relu", t["NCHW"] * 1e3, t["NHWC"] * 1e3,
            t["NCHW"] / t["NHWC"], t["eager"] / t["NHWC"])


def call_overhead(quick: bool) -> list[tuple]:
    g = Graph("tiny_chain")
    h = g.input("x", TensorType((1, 16), "f32"))
    ops = ["neg", "exp", "tanh", "sigmoid", "relu"] * 4
    for op in ops:
        h = g.add(op, [h])
    g.set_outputs(h)
    unfused, fused = compile_(g, fuse_elementwise=False), compile_(g)
    x = torch.randn(1, 16)

    def eager():
        y = x
        for op in ops:
            y = getattr(torch, op)(y)
        return y

    with torch.inference_mode():
        t = block_times({"cuvil_unfused": lambda: unfused(x), "cuvil_fused": lambda: fused(x),
                    "eager": eager}, 1.5 if quick else 3)
    n = len(ops)
    return [(f"{n} tiny ops [1,16]", t["cuvil_unfused"] / n * 1e6, t["eager"] / n * 1e6,
             t["cuvil_fused"] * 1e6, t["eager"] / t["cuvil_unfused"])]


def stalls(quick: bool) -> list[tuple]:
    g = Graph("parallel_affine")
    x = g.input("x", TensorType((B, 1 << 14), "f32"))
    g.set_outputs(g.add("add", [g.add("mul", [x, g.scalar(2.0)]), g.scalar(1.0)]))
    compiled = compile_(g)
    xt = torch.randn(16, 1 << 14)
    conv = torch.nn.Conv2d(16, 16, 3, padding=1).eval()
    img = torch.randn(4, 16, 32, 32)
    lat = []
    with torch.inference_mode():
        for _ in range(200 if quick else 1000):
            conv(img)  # torch's OpenMP pool just ran
            t0 = time.perf_counter()
            compiled(xt)
            lat.append(time.perf_counter() - t0)
    lat.sort()
    pct = lambda p: lat[int(p * (len(lat) - 1))] * 1e6  # noqa: E731
    return [("x*2+1 on 16x16384 after a torch conv", pct(0.5), pct(0.9), pct(0.99),
             lat[-1] * 1e6, sum(v > 4e-3 for v in lat))]


TABLES = [
    ("Fused elementwise chains", elementwise_chains,
     ("case", "cuvil GB/s", "copy GB/s", "of copy", "x eager")),
    ("GEMM + epilogue", gemm_epilogue,
     ("case", "cuvil GFLOP/s", "numpy GEMM GFLOP/s", "of numpy", "x eager")),
    ("Convolution layouts", conv_layouts,
     ("case", "NCHW ms", "NHWC ms", "NHWC speed-up", "x eager")),
    ("Per-call overhead", call_overhead,
     ("case", "cuvil us/op", "eager us/op", "fused call us", "x eager")),
    ("Thread-pool stalls", stalls, ("case", "p50 us", "p90 us", "p99 us", "max us", "> 4 ms")),
]


def render(title: str, header: tuple, rows: list[tuple], markdown: bool) -> str:
    cells = [[c if isinstance(c, str) else f"{c:.2f}" for c in row] for row in rows]
    if markdown:
        lines = [f"### {title}", "", "| " + " | ".join(header) + " |",
                 "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in cells]
        return "\n".join(lines) + "\n"
    widths = [max(len(str(x)) for x in col) for col in zip(header, *cells, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([title, fmt.format(*header)] + [fmt.format(*r) for r in cells]) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer cases, shorter timings")
    parser.add_argument("--markdown", action="store_true", help="print markdown tables")
    parser.add_argument("--only", nargs="*", help="table titles to run (substring match)")
    args = parser.parse_args(argv)
    print(f"torch threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.2f}, "
          f"kernel cache {CACHE}\n")
    for title, fn, header in TABLES:
        if args.only and not any(o.lower() in title.lower() for o in args.only):
            continue
        print(render(title, header, fn(args.quick), args.markdown), flush=True)


if __name__ == "__main__":
    main()
