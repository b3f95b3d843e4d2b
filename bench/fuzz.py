"""The differential fuzzer at release scale: `--n` random models (tests/fuzz), each compiled
by Cuvil and compared with eager, counted as passed, refused (by reason), miscompiled or
crashed; every failure is shrunk to a minimal model and written as a runnable reproducer.

    .venv/bin/python bench/fuzz.py --n 5000 [--seed 0] [--threads-share 0.1] [--warm-share 0.2]
                                             [--out DIR]

Compiles use a cache directory of their own (`--cache-dir`, else a temporary one), so
kernels one model compiled serve the next and the user's cache is left alone.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fuzz"))


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="models to run")
    parser.add_argument("--seed", type=int, default=0, help="the first model's seed")
    parser.add_argument("--threads-share", type=float, default=0.1,
                        help="share of models also called from 4 threads at once")
    parser.add_argument("--warm-share", type=float, default=0.2,
                        help="share of models compiled twice (the program cache's entry)")
    parser.add_argument("--max-ops", type=int, default=10, help="statements per model, at most")
    parser.add_argument("--out", type=Path, default=Path("fuzz-findings"),
                        help="folder for the reproducers")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--shrink-budget", type=int, default=40,
                        help="compiles a failure's shrinking may spend (0: write it as drawn)")
    return parser.parse_args()


def run(args: argparse.Namespace) -> Counter:
    """Check every seed; print a line per failure, write its reproducer; the tally."""
    from fuzz_check import check
    from fuzz_generate import generate
    from fuzz_shrink import Shrinker, file_name, reproducer

    models = Path(tempfile.mkdtemp(prefix="cuvil-fuzz-models-"))
    args.out.mkdir(parents=True, exist_ok=True)
    tally: Counter = Counter()
    for seed in range(args.seed, args.seed + args.n):
        program = generate(seed, max_ops=args.max_ops, threads_share=args.threads_share,
                           warm_share=args.warm_share)
        outcome = check(program, models)
        tally[outcome.kind] += 1
        if outcome.kind == "refused":
            tally[f"refused: {outcome.where}: {outcome.detail}"] += 1
        if outcome.failed:
            tally[f"{outcome.kind}: {outcome.where}"] += 1
            if args.shrink_budget:
                program, outcome = Shrinker(outcome, models, args.shrink_budget).shrink(program)
            path = args.out / file_name(program, outcome)
            path.write_text(reproducer(program, outcome))
            print(f"seed {seed}: {outcome} -> {path}", flush=True)
        if (seed - args.seed + 1) % 50 == 0:
            print(f"{seed - args.seed + 1} models: {summary(tally)}", flush=True)
    return tally


def summary(tally: Counter) -> str:
    kinds = ("passed", "refused", "miscompile", "crash")
    return ", ".join(f"{tally[k]} {k}" for k in kinds)


def report(tally: Counter, n: int, seconds: float) -> None:
    print(f"\n{n} models in {seconds:.0f} s ({seconds / max(n, 1):.1f} s each): {summary(tally)}")
    for prefix in ("refused: ", "miscompile: ", "crash: "):
        for key, count in tally.most_common():
            if key.startswith(prefix):
                print(f"  {count:5d}  {key}")


def main() -> int:
    args = arguments()
    os.environ["CUVIL_CACHE_DIR"] = str(args.cache_dir or tempfile.mkdtemp(prefix="cuvil-fuzz-"))
    start = time.perf_counter()
    tally = run(args)
    report(tally, args.n, time.perf_counter() - start)
    return 1 if tally["miscompile"] or tally["crash"] else 0


if __name__ == "__main__":
    sys.exit(main())
