"""The compile cache on a stream of model versions, as a deployment engineer sees it.

    .venv/bin/python bench/cache.py [--versions 20] [--model transformer]
    .venv/bin/python bench/cache.py --versions 1000          # a long deployment

One process, one fresh cache directory. For each of N versions of a zoo model it times
`cuvil.compile` (export, cache lookup, optimization on a miss, lowering with the kernels
cached), with the versions made three ways:

    same     the same model again                      (expected: hits)
    weights  one weight changed per version            (the key's `constants` part changes)
    layer    one layer's output scaled anew        (the key's `program` part changes; only
                                                    that layer's kernel is new)

and, for reference, the same compile with `cache=False`. It prints per stream the median
time per version and its split (export, optimize: the lookup or the optimizer, codegen:
lowering to text, numba: writing, importing and compiling or loading the kernels), the
graph cache's hit rate and the kernels' (a kernel not compiled: loaded from Numba's cache
or already compiled in this process), then the cache directory's size and the peak memory;
every compiled version is checked against eager.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cuvil  # noqa: E402
from cuvil import zoo  # noqa: E402
from cuvil.cache import evict  # noqa: E402


def versions(kind: str, model: torch.nn.Module, n: int):
    """`n` versions of `model`: the same, one weight nudged, or one layer's output scaled
    by a new factor (a new program: the factor is a constant of the graph)."""
    params = [p for p in model.parameters() if p.dim() >= 1]
    layers = [m for m in model.modules()
              if not list(m.children()) and list(m.parameters(recurse=False))]
    for i in range(n):
        if kind == "weights":
            with torch.no_grad():
                params[i % len(params)].view(-1)[0] += 1e-3
        elif kind == "layer":
            layer = layers[i % len(layers)]
            plain = type(layer).forward.__get__(layer)
            layer.forward = lambda *a, f=plain, k=i: f(*a) * (1.0 + k)
        yield model


def reference(model: torch.nn.Module, inputs: tuple) -> torch.Tensor:
    """Eager, without torch's fused transformer fast path: it reads the weights directly
    and would skip a layer's replaced `forward` (export, and so Cuvil, see it)."""
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad():
            return model(*inputs)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)


def split(fast) -> dict[str, float]:
    """Seconds of one compile: export, optimize (lookup or optimizer), codegen, numba."""
    totals, report = fast.compile_trace.totals, fast.report
    optimize = sum(v for k, v in totals.items() if k not in ("import", "lower"))
    return {"export": totals["import"], "optimize": optimize, "codegen": report.lower_s,
            "numba": report.compile_s - report.lower_s}


def run_stream(kind: str, name: str, n: int, cache: bool) -> dict:
    model, inputs = zoo.get(name)
    times, hits, errors, parts, reused, jitted = [], 0, [], {}, 0, 0
    for version in versions(kind, model, n):
        start = time.perf_counter()
        fast = cuvil.compile(version, inputs, cache=cache)
        times.append(time.perf_counter() - start)
        hits += fast.report.optimizer.cache.startswith("hit")
        errors.append((fast(*inputs) - reference(version, inputs)).abs().max().item())
        for k, v in split(fast).items():
            parts.setdefault(k, []).append(v)
        kernels = [k for k in fast.report.kernels if k.jit]
        reused += sum(k.cached for k in kernels)
        jitted += len(kernels)
    return {"median_s": statistics.median(times), "hit_rate": hits / n,
            "kernel_hits": reused / max(jitted, 1), "kernels": jitted / n,
            "max_err": max(errors), "parts": {k: statistics.median(v)
                                              for k, v in parts.items()}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=int, default=20)
    parser.add_argument("--model", default="transformer", choices=sorted(zoo.MODELS))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        os.environ["CUVIL_CACHE_DIR"] = directory
        rows = [(kind, run_stream(kind, args.model, args.versions, cache=True))
                for kind in ("same", "weights", "layer")]
        rows.append(("cache off", run_stream("weights", args.model, args.versions, False)))
        size = sum(b for _, b in evict.usage(Path(directory)).values())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
    print(f"zoo:{args.model}, {args.versions} versions per stream; cache {size / 1e6:.1f} MB; "
          f"peak RSS {rss:.0f} MB")
    parts = list(rows[0][1]["parts"])
    print(f"{'stream':<10} {'median s':>9} " + " ".join(f"{p:>9}" for p in parts)
          + f" {'graph hit':>10} {'kernel hit':>11} {'kernels':>8} {'max err':>9}")
    for kind, r in rows:
        split_s = " ".join(f"{r['parts'][p]:>9.3f}" for p in parts)
        print(f"{kind:<10} {r['median_s']:>9.3f} {split_s} {r['hit_rate']:>10.0%} "
              f"{r['kernel_hits']:>11.0%} {r['kernels']:>8.1f} {r['max_err']:>9.1e}")
    print("median seconds per version; kernel hit: kernels not compiled (Numba's disk cache, "
          "or compiled already in this process); kernels: per version")


if __name__ == "__main__":
    main()
