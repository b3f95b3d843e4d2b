"""Library models as users bring them through torch eager, torch.compile, ONNX Runtime,
OpenVINO (f32) and Cuvil, side by side, at batch 1 and a larger batch.

    .venv/bin/python bench/real_models.py [--quick] [--markdown] [--models resnet18,bert]
                                          [--threads 2] [--latency-only] [--json out.json]

The models are `bench/real_suite.py`'s (torchvision, timm, transformers, LSTM/GRU; random
weights). For each model and batch: median ms of each system (the best of several block
medians, `bench/models.py`'s `block_times`), Cuvil / ONNX Runtime, Cuvil / OpenVINO and
Cuvil / torch.compile (lower is faster), the share of Cuvil's call spent in torch fallbacks
(from `compiled.profile`: the fallback steps' time over the whole call), the max abs error
of Cuvil and of the ONNX runtimes against eager (checked before anything is timed), and on
the batch-1 row Cuvil's new-model compile time: `cuvil.compile` in a fresh process whose
cache holds only the drivers and the checked stock rules (copied from the cache the
in-process compile filled), in brackets its lowering step. Cuvil compiles once, from the
batch-1 inputs; the model is exported to ONNX once per batch, for both ONNX runtimes
(`bench/runtimes.py`). A system that cannot export, compile or run a model is a cell
saying so (its error on stderr), and the others are still measured.
`--quick` runs `real_suite.QUICK` with shorter timings unless `--models` names others.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cuvil  # noqa: E402
from bench.models import block_times, machine, table  # noqa: E402
from bench.real_suite import QUICK, SUITE, build, first_tensor  # noqa: E402
from bench.runtimes import build_openvino, build_ort, exported  # noqa: E402

NEW_MODEL = """
import json, sys, time, torch
if {threads!r}:
    torch.set_num_threads({threads!r})
sys.path.insert(0, {root!r})
import cuvil
from bench.real_suite import build
model, inputs, _ = build({name!r})
t0 = time.perf_counter()
from cuvil.runtime.threads import numba_startup
numba_startup()
compiled = cuvil.compile(model, inputs)
print(json.dumps({{"compile_s": time.perf_counter() - t0, "lower_s": compiled.report.compile_s}}))
"""


def new_model_compile(name: str, drivers: str, threads: int | None) -> dict:
    """`cuvil.compile` of suite model `name` in a fresh process, its cache a copy of the
    drivers and checked rules in cache directory `drivers` (nothing of any model)."""
    cache = tempfile.mkdtemp(prefix="cuvil-real-new-")
    for part in ("numba", "rules"):
        if Path(drivers, part).is_dir():
            shutil.copytree(Path(drivers, part), Path(cache, part))
    code = NEW_MODEL.format(root=str(ROOT), name=name, threads=threads)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "CUVIL_CACHE_DIR": cache}, timeout=900)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if out.returncode != 0:
        _failed(name, "new-model compile", RuntimeError(out.stderr.strip()[-300:]))
        return {}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _failed(name: str, what: str, e: BaseException) -> None:
    first = (str(e).strip().splitlines() or [""])[0][:200]
    print(f"{name}: {what} failed: {type(e).__name__}: {first}", file=sys.stderr, flush=True)


def _error(got, want: torch.Tensor) -> float:
    return (first_tensor(got) - want).abs().max().item()


def fallback_share(name: str, fast, inputs: tuple, runs: int) -> float | None:
    """Percent of a compiled call spent in torch fallbacks (the profile's fallback steps)."""
    try:
        prof = fast.profile(inputs, runs=runs, warmup=3)
    except Exception as e:
        _failed(name, "profile", e)
        return None
    means = prof.step_means_us()
    fallback = sum(m for s, m in zip(prof.steps, means, strict=True) if s.kind == "fallback")
    return 100 * fallback / max(prof.call_us(), 1e-9)


def contenders(name: str, model, inputs: tuple, expected: torch.Tensor, tc, fast,
               threads: int | None) -> tuple[dict, dict]:
    """The no-argument calls to time, and each system's max error or failure note."""
    fns, notes = {"eager": lambda: model(*inputs)}, {}
    try:
        with torch.inference_mode():
            notes["torch.compile"] = _error(tc(*inputs), expected)
        fns["torch.compile"] = lambda: tc(*inputs)
    except Exception as e:
        _failed(name, "torch.compile", e)
        notes["torch.compile"] = "fails"
    try:
        onnx = exported(model, inputs)
    except Exception as e:
        _failed(name, "ONNX export", e)
        onnx = None
    for system, build_runtime in (("ort", build_ort), ("openvino", build_openvino)):
        if onnx is None:
            notes[system] = "export fails"
            continue
        try:
            run, _ = build_runtime(model, inputs, threads, onnx)
            notes[system] = _error(run()[0], expected)
            fns[system] = run
        except Exception as e:
            _failed(name, system, e)
            notes[system] = "fails"
    if fast is not None:
        try:
            notes["cuvil"] = _error(fast(*inputs), expected)
            fns["cuvil"] = lambda: fast(*inputs)
        except Exception as e:
            _failed(name, "cuvil call", e)
    notes.setdefault("cuvil", "fails")
    return fns, notes


def compile_cuvil(name: str, model, inputs: tuple, drivers: str):
    """Cuvil's compiled model (its cache the run's drivers cache), or None if it fails."""
    os.environ["CUVIL_CACHE_DIR"] = drivers
    try:
        return cuvil.compile(model, inputs)
    except Exception as e:
        _failed(name, "cuvil.compile", e)
        return None


def run_model(name: str, drivers: str, args) -> list[dict]:
    """One row per batch size: every system's median ms, the ratios, the fallback share."""
    torch._dynamo.reset()
    model, small, large = build(name)
    fast = compile_cuvil(name, model, small, drivers)
    new = new_model_compile(name, drivers, args.threads) if fast and not args.latency_only \
        else {}
    tc = torch.compile(model)
    rows = []
    for inputs in (small, large):
        with torch.inference_mode():
            expected = first_tensor(model(*inputs))
        fns, notes = contenders(name, model, inputs, expected, tc, fast, args.threads)
        with torch.inference_mode():
            times = block_times(fns, args.seconds, args.rounds)
        ms = {k: times[k] * 1e3 for k in times}
        share = fallback_share(name, fast, inputs, 20) if "cuvil" in ms else None
        rows.append({"model": name, "batch": int(inputs[0].shape[0]), "ms": ms,
                     "notes": notes, "fallback_pct": share,
                     "new_s": new.get("compile_s") if inputs is small else None,
                     "new_lower_s": new.get("lower_s") if inputs is small else None})
    return rows


HEADER = ["model", "batch", "eager ms", "torch.compile ms", "ORT ms", "OpenVINO ms",
          "Cuvil ms", "Cuvil/ORT", "Cuvil/OpenVINO", "Cuvil/torch.compile", "fallback %",
          "Cuvil err", "ORT err", "OpenVINO err", "new model s"]


def _cells(r: dict) -> list[str]:
    ms, notes = r["ms"], r["notes"]

    def time_cell(system: str) -> str:
        return f"{ms[system]:.3f}" if system in ms else str(notes.get(system, "-"))

    def ratio(a: str, b: str) -> str:
        return f"{ms[a] / ms[b]:.2f}" if a in ms and b in ms else "-"

    def err(system: str) -> str:
        v = notes.get(system)
        return f"{v:.1e}" if isinstance(v, float) else "-"

    new = "-" if r["new_s"] is None else f"{r['new_s']:.1f}"
    if r["new_lower_s"] is not None:
        new += f" ({r['new_lower_s']:.1f})"
    share = "-" if r["fallback_pct"] is None else f"{r['fallback_pct']:.1f}"
    return [r["model"], str(r["batch"]), time_cell("eager"), time_cell("torch.compile"),
            time_cell("ort"), time_cell("openvino"), time_cell("cuvil"), ratio("cuvil", "ort"),
            ratio("cuvil", "openvino"), ratio("cuvil", "torch.compile"), share, err("cuvil"),
            err("ort"), err("openvino"), new]


def render(rows: list[dict], markdown: bool) -> str:
    cells = [_cells(r) for r in rows]
    return table(HEADER, cells, markdown)


def parse(argv: list[str] | None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="suite models, comma-separated (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help=f"shorter timings; models {','.join(QUICK)} unless --models")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--threads", type=int, help="threads for every system")
    parser.add_argument("--latency-only", action="store_true", help="no new-model compile")
    args = parser.parse_args(argv)
    names = args.models.split(",") if args.models else list(QUICK if args.quick else SUITE)
    unknown = [n for n in names if n not in SUITE]
    if unknown:
        parser.error(f"unknown models {unknown}; the suite has {', '.join(SUITE)}")
    args.names = names
    args.seconds, args.rounds = (2.0, 3) if args.quick else (6.0, 5)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.latency_only:  # compile times as an installed package has them
        compileall.compile_dir(ROOT / "cuvil", quiet=1)
    print(machine(), flush=True)
    drivers = tempfile.mkdtemp(prefix="cuvil-real-drivers-")
    rows = []
    try:
        for name in args.names:
            model_rows = run_model(name, drivers, args)
            rows += model_rows
            print(render(model_rows, args.markdown), flush=True)
    finally:
        shutil.rmtree(drivers, ignore_errors=True)
    if len(args.names) > 1:
        print(render(rows, args.markdown))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
