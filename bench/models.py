"""The zoo through torch eager, torch.compile, ONNX Runtime, OpenVINO and cuvil, side by side.

    .venv/bin/python bench/models.py [--quick] [--markdown] [--models mlp1,cnn] [--skip ort]
                                     [--threads 1] [--latency-only]

For every case: latency (the best of several block medians, see `block_times`), ratios to
eager, to ONNX Runtime and to OpenVINO in f32 (lower is faster; `-` where a runtime was
skipped or could not export or run the model; both read one ONNX export,
`bench/runtimes.py`), max abs error against eager, and compile times. Latencies: all
systems in one process under their default settings (no `OMP_WAIT_POLICY`), timed in
alternating blocks so that drift hits all of them alike. Compile times: torch.compile,
ONNX Runtime and OpenVINO (the export and the session) in this process; cuvil in fresh
processes: cold (an empty cache directory: the shared drivers are compiled too, once per
installation), new model (a cache holding only the drivers and the checked stock rules,
copied from the cold one: a model this installation has not compiled before), warm (the
cold one's cache again). Cuvil's cells: the whole `cuvil.compile`, and in brackets its
lowering step, `compile_graph`, after Numba's one-time start-up in the process (measured
on its own, column `numba s`; it is part of the whole). Every system is called as a
PyTorch user calls it: torch tensors in, torch tensors out (the ONNX runtimes' calls
include `x.numpy()` and `torch.from_numpy`, 1-3 us). `--threads n` runs every system on n
threads (torch's setting, which Cuvil follows, and the ONNX runtimes' intra-op pools;
Cuvil's compile processes too); `--latency-only` compiles Cuvil once, in this process, and
leaves the compile-time columns empty. Before compile times are measured, Cuvil's bytecode
is compiled (`compileall`), as pip does on install: an editable install leaves it to the
first import, which `PYTHONDONTWRITEBYTECODE` forbids.
"""

from __future__ import annotations

import argparse
import compileall
import functools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cuvil  # noqa: E402
from bench.runtimes import build_openvino, build_ort, exported  # noqa: E402
from cuvil import zoo  # noqa: E402

CASES = {  # label -> (zoo model, sizes)
    "mlp1": ("mlp", {"batch": 1}),
    "mlp64": ("mlp", {"batch": 64}),
    "cnn": ("cnn", {}),
    "transformer": ("transformer", {}),
    "gpt2": ("gpt2", {}),
    "mobilenet": ("mobilenet", {}),
    "resnet": ("resnet", {}),
    "vit": ("vit", {}),
    "mixer": ("mixer", {}),
    "axpy": ("axpy", {}),
    "hf_gpt2": ("hf_gpt2", {}),
    "hf_bert": ("hf_bert", {}),
}
SYSTEMS = ("eager", "torch.compile", "ort", "openvino", "cuvil")
RUNTIMES = {"ort": build_ort, "openvino": build_openvino}  # from one ONNX export

WARM = """
import json, sys, time, torch
if {threads!r}:
    torch.set_num_threads({threads!r})
sys.path.insert(0, {root!r})
import cuvil
from cuvil import zoo
model, inputs = zoo.get({name!r}, **{sizes!r})
t0 = time.perf_counter()
from cuvil.runtime.threads import numba_startup
numba_startup()
t1 = time.perf_counter()
compiled = cuvil.compile(model, inputs)
t2 = time.perf_counter()
print(json.dumps({{"compile_s": t2 - t0, "numba_s": t1 - t0,
                  "lower_s": compiled.report.compile_s, "hit": compiled.report.cache_hit}}))
"""


def block_times(fns: dict[str, Callable], seconds: float, rounds: int = 5) -> dict[str, float]:
    """Seconds per call of each system: the median within each block, the best block kept.

    Systems are timed in blocks, alternating in rounds. This machine is shared: another
    job taking a core makes two-thread runtimes (torch's, ORT's, ours) stall in 8 ms steps
    for as long as it runs, so the best of the rounds' medians is what each system does
    on the machine alone; it is reported with the load average.
    """
    best = {k: float("inf") for k in fns}
    per_block = seconds / rounds / max(len(fns), 1)
    for _ in range(rounds):
        for name, fn in fns.items():
            for _ in range(3):  # the first calls after another system ran are not timed
                fn()
            samples = []
            end = time.perf_counter() + per_block
            while True:
                t0 = time.perf_counter()
                fn()
                t1 = time.perf_counter()
                samples.append(t1 - t0)
                if t1 > end:
                    break
            best[name] = min(best[name], statistics.median(samples))
    return best


def outputs(value) -> torch.Tensor:
    return value[0] if isinstance(value, tuple | list) else value


def build_torch_compile(model, inputs):
    compiled = torch.compile(model)
    t0 = time.perf_counter()
    with torch.inference_mode():
        compiled(*inputs)
    return compiled, time.perf_counter() - t0


def compile_in_process(name: str, sizes: dict, cache: str,
                       threads: int | None = None) -> dict:
    """`cuvil.compile` of a zoo model in a fresh process using kernel cache `cache`."""
    code = WARM.format(root=str(ROOT), name=name, sizes=sizes, threads=threads)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "CUVIL_CACHE_DIR": cache}, timeout=900)
    return json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {}


def build_cuvil(model, inputs, name, sizes, cache: str, threads: int | None = None,
                compile_times: bool = True):
    """Cuvil's compiled model (using cache directory `cache`), and its cold, new-model and
    warm compiles, each in a fresh process (`{}` each without `compile_times`)."""
    if not compile_times:
        os.environ["CUVIL_CACHE_DIR"] = cache
        return cuvil.compile(model, inputs), {}, {}, {}
    cold = compile_in_process(name, sizes, cache, threads)
    drivers = tempfile.mkdtemp(prefix="cuvil-bench-drivers-")
    for part in ("numba", "rules"):  # Cuvil's drivers and checked rules: nothing of the model
        if Path(cache, part).is_dir():
            shutil.copytree(Path(cache, part), Path(drivers, part))
    new = compile_in_process(name, sizes, drivers, threads)
    shutil.rmtree(drivers, ignore_errors=True)
    warm = compile_in_process(name, sizes, cache, threads)
    os.environ["CUVIL_CACHE_DIR"] = cache
    return cuvil.compile(model, inputs), cold, new, warm


def build_system(system: str, model, inputs, expected, name: str, sizes: dict,
                 threads: int | None, compile_times: bool,
                 export: Callable[[], tuple[bytes, float]]):
    """`(call, row)` for one system besides eager: a no-argument callable, its row's data
    (`export()`: the model's ONNX bytes and the seconds the export took, made once for the
    runtimes that read it; their compile time includes it)."""
    if system == "torch.compile":
        tc, cold = build_torch_compile(model, inputs)
        with torch.inference_mode():
            err = (outputs(tc(*inputs)) - expected).abs().max().item()
        return (lambda: tc(*inputs)), {"compile": cold, "warm": None, "err": err}
    if system in RUNTIMES:
        onnx, export_s = export()
        run, cold = RUNTIMES[system](model, inputs, threads, onnx)
        err = (run()[0] - expected).abs().max().item()
        return run, {"compile": export_s + cold, "warm": None, "err": err}
    cache = tempfile.mkdtemp(prefix="cuvil-bench-")
    cu, cold, new, warm = build_cuvil(model, inputs, name, sizes, cache, threads,
                                      compile_times)
    err = (outputs(cu(*inputs)) - expected).abs().max().item()
    return (lambda: cu(*inputs)), {
        "compile": cold.get("compile_s"), "lower": cold.get("lower_s"),
        "new": new.get("compile_s"), "new_lower": new.get("lower_s"),
        "warm": warm.get("compile_s"), "warm_lower": warm.get("lower_s"),
        "numba": warm.get("numba_s"), "hit": warm.get("hit"), "err": err,
        "kernels": len(cu.report.kernels), "fallbacks": len(cu.report.fallbacks)}


def run_case(label: str, skip: set[str], seconds: float, rounds: int,
             threads: int | None = None, compile_times: bool = True) -> list[dict]:
    """One row per system; a torch.compile, ORT or OpenVINO that fails is a row of `-`, not
    an abort."""
    name, sizes = CASES[label]
    model, inputs = zoo.get(name, **sizes)
    export = functools.cache(lambda: _timed(exported, model, inputs))
    with torch.inference_mode():
        expected = outputs(model(*inputs))
    fns = {"eager": lambda: model(*inputs)}
    rows = {"eager": {"compile": None, "warm": None, "err": 0.0}}
    for system in SYSTEMS[1:]:
        if system in skip:
            continue
        try:
            fns[system], rows[system] = build_system(system, model, inputs, expected, name,
                                                     sizes, threads, compile_times, export)
        except Exception as e:
            if system == "cuvil":
                raise
            first = (str(e).strip().splitlines() or [""])[0][:200]
            print(f"{label}: {system} failed: {type(e).__name__}: {first}", file=sys.stderr)
            rows[system] = {"compile": None, "warm": None, "err": None, "failed": True}
    with torch.inference_mode():
        times = block_times(fns, seconds, rounds)
    return [{"case": label, "system": system, "ms": _ms(times.get(system)),
             "vs_eager": _ratio(times.get(system), times["eager"]),
             "vs_ort": _ratio(times.get(system), times.get("ort")),
             "vs_openvino": _ratio(times.get(system), times.get("openvino")), **info}
            for system, info in rows.items()]


def _timed(fn: Callable, *args):
    """`fn(*args)` and the seconds it took."""
    t0 = time.perf_counter()
    value = fn(*args)
    return value, time.perf_counter() - t0


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a / b


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numba
    import onnxruntime
    import openvino

    return (f"{cpu}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}, "
            f"Python {platform.python_version()}, torch "
            f"{torch.__version__} ({torch.get_num_threads()} threads), numba {numba.__version__}, "
            f"onnxruntime {onnxruntime.__version__}, openvino "
            f"{openvino.__version__.split('-')[0]} (f32)")


def render(rows: list[dict], markdown: bool) -> str:
    header = ["case", "system", "median ms", "x eager", "x ort", "x openvino", "max abs err",
              "cold compile s", "new model s", "warm compile s", "numba s"]
    fmt = lambda v, p: "-" if v is None else f"{v:.{p}f}"  # noqa: E731

    def compile_cell(r, key):
        lower = r.get({"warm": "warm_lower", "new": "new_lower"}.get(key, "lower"))
        return fmt(r.get(key), 2) + (f" ({lower:.2f})" if lower is not None else "")

    cells = [[r["case"], r["system"] + (" (failed)" if r.get("failed") else ""),
              fmt(r["ms"], 3), fmt(r["vs_eager"], 2), fmt(r.get("vs_ort"), 2),
              fmt(r.get("vs_openvino"), 2),
              "-" if r["err"] is None else f"{r['err']:.1e}", compile_cell(r, "compile"),
              compile_cell(r, "new"), compile_cell(r, "warm"), fmt(r.get("numba"), 2)]
             for r in rows]
    return table(header, cells, markdown)


def table(header: list[str], cells: list[list[str]], markdown: bool) -> str:
    """Rows of cells under `header`: a Markdown table, or columns aligned for a terminal."""
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(c) + " |" for c in cells]) + "\n"
    widths = [max(len(x) for x in col) for col in zip(header, *cells, strict=True)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([line.format(*header)] + [line.format(*c) for c in cells]) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(CASES), help="cases, comma-separated")
    parser.add_argument("--skip", nargs="*", default=[], choices=SYSTEMS[1:])
    parser.add_argument("--quick", action="store_true", help="shorter timings")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--threads", type=int, help="threads for every system")
    parser.add_argument("--latency-only", action="store_true", help="no compile times")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.latency_only:  # compile times as an installed package has them: pip
        compileall.compile_dir(ROOT / "cuvil", quiet=1)  # compiles its bytecode on install
    print(machine(), flush=True)
    rows = []
    for label in args.models.split(","):
        case_rows = run_case(label, set(args.skip), 3.0 if args.quick else 10.0,
                             3 if args.quick else 7, args.threads, not args.latency_only)
        rows += case_rows
        print(render(case_rows, args.markdown), flush=True)
    if len(args.models.split(",")) > 1:
        print(render(rows, args.markdown))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
