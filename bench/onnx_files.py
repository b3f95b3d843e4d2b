"""ONNX Runtime on torch's ONNX file against ONNX Runtime on Cuvil's, side by side.

    .venv/bin/python bench/onnx_files.py [--quick] [--markdown] [--models mlp,cnn] [--real]
                                         [--threads 2] [--runs 200] [--json out.json]

For every zoo model (and with `--real`, every `bench/real_suite.py` model; `--quick` takes
`real_suite.QUICK` of those), two ONNX files of the same model and weights: torch's, from
`torch.onnx.export` (TorchScript at opset 17; the dynamo exporter for the models the
TorchScript one cannot write), and Cuvil's, `cuvil.optimize` then `cuvil.onnx.to_onnx` with
ONNX Runtime's contrib ops (FusedConv, BiasGelu). Each runs in an ONNX Runtime session with
its default options (its own graph optimizations on) and `--threads` intra-op threads
(2 unless told). Per file: its node count, the median latency of `--runs` calls (the two
sessions called in alternation, so that drift on a shared machine hits both alike; numpy in,
numpy out, nothing converted in the timed call), and the max abs error of its first output
against torch eager. `x torch` is Cuvil's latency over torch's (lower is faster). A file
that cannot be written or run is a row saying so (its error on stderr), and the other
models are still measured. `--quick`: fewer runs (`--runs` overrides either).
Zoo models run at their example inputs; real models at the suite's larger batch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# run as a script, this file's directory comes first on sys.path, and this file would
# shadow the `onnx` package for everything that imports it
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import cuvil  # noqa: E402
from bench.models import table  # noqa: E402
from cuvil import zoo  # noqa: E402

# exported by torch.onnx.export(dynamo=True): the TorchScript exporter cannot write them
DYNAMO = {"transformer", "bert", "gpt2_real", "llama"}
RUNS = {"quick": 20, "full": 200}


def model_and_inputs(name: str):
    """`(model, inputs, torch's name for the dynamo choice)` of a zoo or `real:` model."""
    if name.startswith("real:"):
        from bench.real_suite import build

        real = name.split(":", 1)[1]
        model, _, big = build(real)
        return model, big, ("gpt2_real" if real == "gpt2" else real)
    model, inputs = zoo.get(name)
    return model, inputs, name


def eager_output(model, inputs) -> np.ndarray:
    from bench.real_suite import first_tensor

    with torch.no_grad():
        return first_tensor(model(*inputs)).numpy()


def torch_file(model, inputs, exporter: str, path: Path) -> Path:
    names = [f"x{i}" for i in range(len(inputs))]
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if exporter in DYNAMO:
            torch.onnx.export(model, inputs, str(path), dynamo=True, input_names=names)
        else:
            torch.onnx.export(model, inputs, str(path), dynamo=False, opset_version=17,
                              input_names=names)
    return path


def cuvil_file(model, inputs, path: Path) -> Path:
    from cuvil.onnx import to_onnx

    to_onnx(cuvil.optimize(model, inputs), path, contrib=True)
    return path


def session(path: Path, inputs, threads: int):
    """`(a no-argument call of the session on inputs, the file's node count)`."""
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()  # ORT's defaults: every graph optimization on
    options.intra_op_num_threads = threads
    s = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feeds = {i.name: x.numpy() for i, x in zip(s.get_inputs(), inputs, strict=True)}
    nodes = len(onnx.load(str(path), load_external_data=False).graph.node)
    return (lambda: s.run(None, feeds)), nodes


def max_error(got: np.ndarray, want: np.ndarray) -> float:
    if got.shape != want.shape:
        return float("nan")
    return float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max())


def alternating_medians(calls: dict, runs: int) -> dict[str, float]:
    """Seconds per call of each: the median of `runs` calls, the calls in alternation."""
    samples: dict[str, list[float]] = {k: [] for k in calls}
    for call in calls.values():  # warm-up: ORT's first runs allocate
        for _ in range(3):
            call()
    for _ in range(runs):
        for key, call in calls.items():
            t0 = time.perf_counter()
            call()
            samples[key].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}


def build_side(side: str, model, inputs, exporter: str, directory: Path, threads: int,
               want: np.ndarray, label: str) -> tuple:
    """`(call, {"nodes", "err"})` of one side's file, or `(None, {})` where it failed."""
    path = directory / f"{side}.onnx"
    try:
        if side == "torch":
            torch_file(model, inputs, exporter, path)
        else:
            cuvil_file(model, inputs, path)
        call, nodes = session(path, inputs, threads)
        err = max_error(np.asarray(call()[0]), want)
    except Exception as e:  # a row of `-`, not an abort
        first = (str(e).strip().splitlines() or [""])[0][:200]
        print(f"{label}: {side} failed: {type(e).__name__}: {first}", file=sys.stderr)
        return None, {}
    return call, {"nodes": nodes, "err": err}


def run_case(label: str, threads: int, runs: int) -> dict:
    model, inputs, exporter = model_and_inputs(label)
    want = eager_output(model, inputs)
    row: dict = {"case": label}
    calls = {}
    with tempfile.TemporaryDirectory(prefix="cuvil-bench-onnx-") as tmp:
        for side in ("torch", "cuvil"):
            call, info = build_side(side, model, inputs, exporter, Path(tmp), threads,
                                    want, label)
            row.update({f"{side}_{k}": v for k, v in info.items()})
            if call is not None:
                calls[side] = call
        times = alternating_medians(calls, runs)
    for side in ("torch", "cuvil"):
        row[f"{side}_ms"] = times[side] * 1e3 if side in times else None
    both = row["torch_ms"] is not None and row["cuvil_ms"] is not None
    row["ratio"] = row["cuvil_ms"] / row["torch_ms"] if both else None
    return row


HEADER = ["model", "torch nodes", "Cuvil nodes", "torch file ms", "Cuvil file ms",
          "x torch", "torch err", "Cuvil err"]


def _cells(r: dict) -> list[str]:
    fmt = lambda v, p: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
    err = lambda v: "-" if v is None else f"{v:.1e}"  # noqa: E731
    nodes = lambda v: "-" if v is None else str(v)  # noqa: E731
    return [r["case"], nodes(r.get("torch_nodes")), nodes(r.get("cuvil_nodes")),
            fmt(r["torch_ms"], 3), fmt(r["cuvil_ms"], 3), fmt(r["ratio"], 2),
            err(r.get("torch_err")), err(r.get("cuvil_err"))]


def render(rows: list[dict], markdown: bool) -> str:
    cells = [_cells(r) for r in rows]
    return table(HEADER, cells, markdown)


def machine(threads: int) -> str:
    import platform

    import onnxruntime

    from bench.models import machine as models_machine

    return (models_machine().split(", Python")[0] + f", Python {platform.python_version()}, "
            f"onnxruntime {onnxruntime.__version__} ({threads} intra-op threads)")


def cases(args) -> list[str]:
    if args.models:
        return args.models.split(",")
    names = list(zoo.MODELS)
    if args.real:
        from bench.real_suite import QUICK, SUITE

        names += [f"real:{n}" for n in (QUICK if args.quick else SUITE)]
    return names


def parse(argv: list[str] | None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="cases, comma-separated (a real model as real:NAME)")
    parser.add_argument("--real", action="store_true", help="bench/real_suite.py's models too")
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--threads", type=int, default=2, help="ORT intra-op threads")
    parser.add_argument("--runs", type=int, help="calls per file (the median is reported)")
    parser.add_argument("--json", help="also write the rows to this file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    runs = args.runs or RUNS["quick" if args.quick else "full"]
    print(machine(args.threads), flush=True)
    rows = []
    for label in cases(args):
        rows.append(run_case(label, args.threads, runs))
        print(render(rows[-1:], args.markdown), flush=True)
    if len(rows) > 1:
        print(render(rows, args.markdown))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
