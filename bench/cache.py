"""The compile cache and weight swaps on a stream of model versions, as a deployment engineer
sees them.

    .venv/bin/python bench/cache.py [--versions 20] [--model transformer] [--compiles 20]
    .venv/bin/python bench/cache.py --versions 1000          # a long deployment

One process, one fresh cache directory. First, `--versions` weight versions of a zoo model
(every floating tensor scaled by 1 + 1% noise) served from one process, side by side:

    cuvil versions   `fast.with_weights(state)` per version, every version kept: the
                     kernels shared, the constants each version's own
    cuvil in place   `fast.load_state_dict(state)` into one compiled model
    torch.compile    `model.load_state_dict(state)` under one `torch.compile`d model
    cuvil.compile    a fresh `cuvil.compile` per version (caches on; `--compiles` of them)

each timed as the update and the first call after it (median ms), with the memory each
kept version holds of its own (its constants), checked against eager on a sample of
versions (max abs error). Then the compile cache: `--compiles` versions of the
model made three ways, each timed through `cuvil.compile` (export, cache lookup,
optimization on a miss, lowering with the kernels cached):

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
import copy
import functools
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
from cuvil import disk_store as evict  # noqa: E402
from cuvil import zoo  # noqa: E402


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
    optimize = sum(v for k, v in totals.items() if k not in ("import", "lower", "build"))
    return {"export": totals.get("import", 0.0), "optimize": optimize, "codegen": report.lower_s,
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


def weight_versions(model: torch.nn.Module, n: int):
    """`n` state dicts of `model`: every floating tensor scaled by 1 + 1% noise (running
    variances stay positive), made one at a time."""
    base = model.state_dict()
    generator = torch.Generator().manual_seed(0)
    for _ in range(n):
        yield {k: v * (1 + 0.01 * torch.randn(v.shape, generator=generator))
               if v.is_floating_point() else v.clone() for k, v in base.items()}


def own_mb(version, first) -> float:
    """MB of the constants `version` holds that `first` does not share."""
    shared = {a.ctypes.data for a in first._consts}
    return sum(a.nbytes for a in version._consts if a.ctypes.data not in shared) / 1e6


def new_version(fast, kept: list, state: dict, inputs: tuple) -> torch.Tensor:
    kept.append(fast.with_weights(state))
    return kept[-1](*inputs)


def swap_in(model, state: dict, inputs: tuple, call=None) -> torch.Tensor:
    """`state` loaded into `model` (a compiled one, or a module `call` runs)."""
    model.load_state_dict(state)
    return (model if call is None else call)(*inputs)


def served(name: str, n: int, compiles: int) -> list[tuple[str, dict]]:
    """The four ways of serving `n` weight versions (see the module docstring)."""
    model, inputs = zoo.get(name)
    twin, eager, sample = copy.deepcopy(model), copy.deepcopy(model), max(1, n // 20)
    fast = cuvil.compile(model, inputs)
    fast.load_state_dict(model.state_dict())  # recipes recorded (the program cache has none)
    compiled_torch = torch.compile(twin)
    with torch.no_grad():
        compiled_torch(*inputs)  # torch.compile's own compile, before the stream
    rows = {k: {"ms": [], "err": 0.0} for k in ("cuvil versions", "cuvil in place",
                                                   "torch.compile", "cuvil.compile")}
    kept, before = [], rss_mb()
    for i, state in enumerate(weight_versions(model, n)):
        updates = {"cuvil versions": functools.partial(new_version, fast, kept, state, inputs),
                   "cuvil in place": functools.partial(swap_in, fast, state, inputs),
                   "torch.compile": functools.partial(swap_in, twin, state, inputs,
                                                      compiled_torch)}
        if i < compiles:
            updates["cuvil.compile"] = lambda: cuvil.compile(twin, inputs)(*inputs)
        if i % sample == 0:
            eager.load_state_dict(state)
            want = reference(eager, inputs)
        for kind, update in updates.items():
            start = time.perf_counter()
            with torch.no_grad():
                y = update()
            rows[kind]["ms"].append(1e3 * (time.perf_counter() - start))
            if i % sample == 0:
                rows[kind]["err"] = max(rows[kind]["err"], (y - want).abs().max().item())
    per_version = statistics.mean(own_mb(v, fast) for v in kept)
    rss = (rss_mb() - before) / n
    return [(k, {**r, "mb": per_version if k == "cuvil versions" else None,
                 "rss": rss if k == "cuvil versions" else None, "n": len(r["ms"])})
            for k, r in rows.items()]


def rss_mb() -> float:
    """The process's resident memory now, in MB (Linux: /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def print_served(name: str, n: int, rows: list[tuple[str, dict]]) -> None:
    print(f"zoo:{name}, {n} weight versions served from one process")
    print(f"{'way':<15} {'versions':>8} {'update ms':>10} {'MB/version':>11} "
          f"{'RSS MB/version':>15} {'max err':>9}")
    for kind, r in rows:
        mb = f"{r['mb']:.3f}" if r["mb"] is not None else "-"
        rss = f"{r['rss']:.1f}" if r["rss"] is not None else "-"
        print(f"{kind:<15} {r['n']:>8} {statistics.median(r['ms']):>10.2f} {mb:>11} "
              f"{rss:>15} {r['err']:>9.1e}")
    print("update ms: median of the update and the first call after it; MB/version: the "
          "constants a kept version holds of its own (kernels and code are shared); RSS "
          "MB/version: the process's growth over the stream per version kept (the "
          "constants, the version's copy of its weights, its buffers, the allocator's "
          "slack)\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=int, default=20, help="weight versions served")
    parser.add_argument("--compiles", type=int, default=20,
                        help="versions compiled afresh, per compile-cache stream")
    parser.add_argument("--model", default="transformer", choices=sorted(zoo.MODELS))
    args = parser.parse_args(argv)
    compiles = min(args.compiles, args.versions)
    with tempfile.TemporaryDirectory() as directory:
        os.environ["CUVIL_CACHE_DIR"] = directory
        print_served(args.model, args.versions, served(args.model, args.versions, compiles))
        rows = [(kind, run_stream(kind, args.model, compiles, cache=True))
                for kind in ("same", "weights", "layer")]
        rows.append(("cache off", run_stream("weights", args.model, compiles, False)))
        size = sum(b for _, b in evict.usage(Path(directory)).values())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
    print(f"zoo:{args.model}, {compiles} versions per stream; cache {size / 1e6:.1f} MB; "
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
