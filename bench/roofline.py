"""Where the time goes: every kernel measured, predicted by the cost model, and against
its roofline; and whether the rewrites paid (the optimized graph against the imported one).

    .venv/bin/python bench/roofline.py [--models mobilenet,cnn] [--runs 200] [--threads 2]

For each zoo case of `bench/models.py`: `compiled.profile(...).kernel_table()` (see
`cuvil/runtime/roofline.py` for the columns), then the whole call timed for the graph
extraction chose and for the graph as imported (every rule disabled), side by side in
alternating blocks. Extraction must never choose a graph that measures slower: the last
line of each case says `rewrites paid` or `REWRITES LOST`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models import CASES, block_times  # noqa: E402

import cuvil  # noqa: E402
from cuvil import zoo  # noqa: E402
from cuvil.library import load  # noqa: E402


def case(label: str, runs: int, threads: int, seconds: float) -> None:
    name, sizes = CASES[label]
    model, inputs = zoo.get(name, **sizes)
    optimized = cuvil.compile(model, inputs, threads=threads)
    prof = optimized.profile(inputs, runs=runs, warmup=max(runs // 10, 3))
    print(f"== {label} ({threads} threads, {runs} profiled calls)")
    print(prof.kernel_table())
    every_ruleset = list(load(None).rulesets)
    imported = cuvil.compile(model, inputs, threads=threads, disable=every_ruleset)
    with torch.inference_mode():
        times = block_times({"optimized": lambda: optimized(*inputs),
                             "imported": lambda: imported(*inputs)}, seconds)
    ratio = times["optimized"] / times["imported"]
    verdict = "rewrites paid" if ratio <= 1.05 else "REWRITES LOST"
    print(f"whole call: optimized {times['optimized'] * 1e3:.3f} ms "
          f"({len(optimized.report.kernels)} kernels), imported "
          f"{times['imported'] * 1e3:.3f} ms ({len(imported.report.kernels)} kernels): "
          f"{ratio:.2f}x, {verdict}\n", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(CASES), help="cases, comma-separated")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--seconds", type=float, default=4.0, help="timing per case")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    for label in args.models.split(","):
        case(label, args.runs, args.threads, args.seconds)


if __name__ == "__main__":
    main()
