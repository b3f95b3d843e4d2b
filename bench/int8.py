"""INT8 GEMM benchmark: Cuvil's int8 kernels against its fp32 BLAS path, torch's fp32
matmul and torch's fbgemm quantized linear, side by side in one process.

    .venv/bin/python bench/int8.py [--quick] [--markdown] [--threads N]

For each GEMM shape [M, K] x [K, N] (small-model sizes):

* cuvil fp32   `kernels.blas` as generated code calls it (gemv for M <= 8, else gemm)
* cuvil i8     `int8.qgemm_prepared`: u8 activations x s8 per-channel weights, int32
               sums, dequantize + bias epilogue, f32 out (activations already quantized;
               the weight tuple `prepare`d for the static input scale and zero point)
* cuvil q+i8   the same with the f32 -> u8 quantization of the activations in front
* torch fp32   `x @ w` (MKL)
* fbgemm       `torch.ops.quantized.linear` (quint8 in, quint8 out, prepacked weights)
* fbgemm dyn   `torch.ops.quantized.linear_dynamic` (f32 in, quantized inside, f32 out)

Ratios below 1 mean the int8 kernel is faster. `err` is the max abs difference from the
fp32 product over max |fp32| (quantization error; Cuvil's and fbgemm's should match).
Whether the micro-kernel is VNNI is read off its assembly (`vpdpbusd` count).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from models import block_times  # noqa: E402

from cuvil.runtime.threads import choose_layer  # noqa: E402
from cuvil.targets.cpu.kernels import blas, blas_threads, gemv, int8, int8_tile  # noqa: E402
from cuvil.targets.cpu.kernels.quantized import epilogue, pack_weight, quantize  # noqa: E402

SHAPES = [(m, k, n) for m in (1, 32, 256) for k in (64, 256, 1024) for n in (64, 256, 1024)]
QUICK = [(1, 256, 256), (32, 256, 256), (256, 1024, 1024)]
SYSTEMS = ("cuvil fp32", "cuvil i8", "cuvil q+i8", "torch fp32", "fbgemm", "fbgemm dyn")


def vnni_report() -> str:
    """What the micro-kernel compiles to on this CPU (an uncached copy, so that Numba
    shows its assembly)."""
    import numba

    tile = int8_tile.tile_kernel(int8.MR, int8_tile.WIDE // int8_tile.LANES)

    @numba.njit
    def run(x, w, z, t):
        tile(x, 0, 1, w, 0, 4 * int8_tile.WIDE, 1, z, t)

    run(np.zeros((1, 4), np.uint8), np.zeros(4 * int8_tile.WIDE, np.int8),
        np.zeros(int8_tile.WIDE, np.int32), np.zeros(int8.MR * int8_tile.WIDE, np.int32))
    asm = next(iter(run.inspect_asm().values()))
    counts = {op: asm.count(op) for op in ("vpdpbusd", "vpmaddubsw", "vpmaddwd", "vpmulld")}
    return (f"target VNNI lanes: {int8_tile.VNNI or 'none'}; "
            f"micro-kernel {int8.MR}x{int8_tile.WIDE}: "
            + ", ".join(f"{k} x{v}" for k, v in counts.items() if v))


def case(m: int, k: int, n: int, threads: int, seconds: float) -> dict:
    """Times (s) of every system on one shape, and the int8 errors against fp32."""
    g = torch.Generator().manual_seed(m * 7 + k * 3 + n)
    x = torch.randn(m, k, generator=g)
    w = torch.randn(k, n, generator=g) / k ** 0.5
    bias = torch.randn(n, generator=g) * 0.1
    lo, hi = float(x.min()), float(x.max())
    xs, xz = (hi - lo) / 255, int(round(-lo / ((hi - lo) / 255)))
    ws = (w.abs().amax(dim=0) / 127).clamp(min=1e-8)
    wq = torch.quantize_per_channel(w.T.contiguous(), ws, torch.zeros(n, dtype=torch.long), 0,
                                    torch.qint8)
    packed_t = torch.ops.quantized.linear_prepack(wq, bias)
    xq_t = torch.quantize_per_tensor(x, xs, xz, torch.quint8)
    ref = (x @ w + bias).numpy()
    out_scale = float(np.abs(ref).max()) / 127

    xn, wn, bn = x.numpy(), w.numpy(), bias.numpy()
    wt = np.ascontiguousarray(wn.T)
    c32 = np.empty((m, n), np.float32)
    qw = pack_weight(wq.int_repr().numpy().T, ws.numpy())
    ep = epilogue(xs)
    pw = int8.prepare(qw.args(bn), xz)
    xq = quantize(xn, xs, xz, "u8")
    xbuf, c8 = np.empty_like(xq), np.empty((m, n), np.float32)

    def cuvil_fp32():
        if m <= 8:
            gemv.gemv(xn, wt, c32, threads)
        else:
            blas.gemm(xn, wn, c32, threads)

    def cuvil_q_i8():
        int8.quantize_into(xn, 1.0 / xs, xz, 0, 255, xbuf)
        int8.qgemm_prepared(xbuf, pw, ep, c8, threads)

    fns = {"cuvil fp32": cuvil_fp32,
           "cuvil i8": lambda: int8.qgemm_prepared(xq, pw, ep, c8, threads),
           "cuvil q+i8": cuvil_q_i8,
           "torch fp32": lambda: torch.matmul(x, w),
           "fbgemm": lambda: torch.ops.quantized.linear(xq_t, packed_t, out_scale, 128),
           "fbgemm dyn": lambda: torch.ops.quantized.linear_dynamic(x, packed_t)}
    for f in fns.values():
        f()
    scale = float(np.abs(ref).max())
    fb = torch.ops.quantized.linear(xq_t, packed_t, out_scale, 128).dequantize().numpy()
    return {"t": block_times(fns, seconds),
            "err cuvil": float(np.abs(c8 - ref).max()) / scale,
            "err fbgemm": float(np.abs(fb - ref).max()) / scale}


def table(rows: list[tuple], markdown: bool) -> str:
    head = (["M", "K", "N"] + [f"{s} ms" for s in SYSTEMS]
            + ["i8 / cuvil fp32", "i8 / torch fp32", "i8 / fbgemm", "q+i8 / fbgemm dyn",
               "i8 GOP/s", "err cuvil", "err fbgemm"])
    lines = []
    for (m, k, n), r in rows:
        t = r["t"]
        cells = [m, k, n] + [f"{t[s] * 1e3:.4f}" for s in SYSTEMS] + [
            f"{t['cuvil i8'] / t['cuvil fp32']:.2f}", f"{t['cuvil i8'] / t['torch fp32']:.2f}",
            f"{t['cuvil i8'] / t['fbgemm']:.2f}", f"{t['cuvil q+i8'] / t['fbgemm dyn']:.2f}",
            f"{2 * m * k * n / t['cuvil i8'] / 1e9:.0f}", f"{r['err cuvil']:.1e}",
            f"{r['err fbgemm']:.1e}"]
        lines.append([str(c) for c in cells])
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(out + ["| " + " | ".join(c) + " |" for c in lines])
    widths = [max(len(h), *(len(c[i]) for c in lines)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    return "\n".join([fmt.format(*head)] + [fmt.format(*c) for c in lines])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="three shapes, short blocks")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    choose_layer()  # before any parallel kernel loads: Numba's OpenMP pool set passive
    import numba

    numba.set_num_threads(args.threads)
    blas_threads.single_threaded_blas()
    print(f"threads {args.threads}, torch {torch.__version__} (quantized engine "
          f"{torch.backends.quantized.engine}), load average "
          f"{' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    print(vnni_report())
    rows = [(s, case(*s, args.threads, 0.6 if args.quick else 1.2))
            for s in (QUICK if args.quick else SHAPES)]
    print(table(rows, args.markdown))


if __name__ == "__main__":
    main()
