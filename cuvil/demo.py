"""The demo (`./dev demo`, `python -m cuvil.demo [MODEL]`): Cuvil compiles a bundled model,
step by step, in words a newcomer can follow.

Each step is one function that prints what it did and returns what the next step needs;
`main` runs them in order.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter

import torch

from cuvil import zoo
from cuvil.errors import CuvilError
from cuvil.ir.graph import Graph

TOLERANCE = 1e-4  # max abs difference accepted against torch eager, in f32
BATCHES = (1, 7)  # two batch sizes, both served by the one compiled graph


def step_import(name: str, model: torch.nn.Module, inputs: tuple) -> Graph:
    from cuvil.frontend import from_torch

    graph = from_torch(model, inputs)
    print(f"Step 1 - import. torch.export traced {type(model).__name__} (zoo:{name}) into a "
          f"Cuvil graph of {len(graph.ops())} operations:")
    for n in graph.inputs:
        print(f"  input {n}: {graph[n].type}"
              + ("  (batch is symbolic: one graph serves every batch size)"
                 if "batch" in str(graph[n].type) else ""))
    ops = Counter(graph.ops())
    print("  " + ", ".join(f"{op} x{k}" if k > 1 else op for op, k in ops.most_common()))
    return graph


def step_optimize(graph: Graph) -> Graph:
    from cuvil.pipeline import optimize

    out = optimize(graph)
    report = out.report
    rules = [r for r in report.rules.values() if not r.label.startswith("unfold:")]
    print(f"\nStep 2 - optimize. {len(rules)} stock rules (rules/ and the targets' placement "
          f"rules) applied at once (equality saturation, {report.stop_reason} after "
          f"{len(report.iterations)} iterations); the cost model picked the cheapest "
          f"equivalent graph:")
    for stat in sorted(report.rules.values(), key=lambda r: r.label):
        if stat.in_result:
            print(f"  {stat.label:<24} {stat.where:<34} {stat.description}")
    print(f"  estimated cost {report.cost_before:.0f} us -> {report.cost_after:.0f} us; "
          f"{report.nodes_before} -> {report.nodes_after} operations: "
          + ", ".join(sorted(set(out.ops()))))
    fused = next((n for n in out if len(n.origin) > 1), None)
    if fused is not None:
        print("  why, for one node (`cuvil explain`):\n    "
              + report.explain(fused).replace("\n", "\n    "))
    return out


def step_compile(graph: Graph):
    from cuvil.runtime import compile_graph

    start = time.perf_counter()
    compiled = compile_graph(graph)
    report = compiled.report
    fallbacks = f", {len(report.fallbacks)} left to torch" if report.fallbacks else ""
    print(f"\nStep 3 - compile. {len(report.kernels)} Numba kernels"
          f"{' (from the on-disk cache)' if report.cache_hit else ''} in "
          f"{time.perf_counter() - start:.1f} s{fallbacks}; one generated function runs "
          "them all (`compiled.source` shows the code):")
    for k in report.kernels:
        print(f"  {k.name} [{k.template}]")
    return compiled


def step_check(name: str, model: torch.nn.Module, compiled) -> bool:
    print("\nStep 4 - check. The compiled model against PyTorch eager:")
    ok = True
    for batch in BATCHES:
        _, inputs = zoo.get(name, batch=batch)
        with torch.no_grad():
            want = model(*inputs)
        err = (compiled(*inputs) - want).abs().max().item()
        ok &= err <= TOLERANCE
        print(f"  batch {batch}: largest difference {err:.1e} "
              + ("(ok)" if err <= TOLERANCE else f"(MISMATCH: above {TOLERANCE})"))
    return ok


def _median_ms(fn, inputs, runs: int = 30) -> float:
    for _ in range(3):
        fn(*inputs)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn(*inputs)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def step_time(model: torch.nn.Module, compiled, inputs: tuple) -> None:
    with torch.no_grad():
        eager = _median_ms(model, inputs)
    cuvil = _median_ms(compiled, inputs)
    print(f"\nStep 5 - time. Median of 30 calls at batch {inputs[0].shape[0]}: torch eager "
          f"{eager:.3f} ms, Cuvil {cuvil:.3f} ms ({eager / cuvil:.2f}x eager's speed; "
          "bench/models.py compares more systems)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cuvil.demo", description=__doc__)
    parser.add_argument("model", nargs="?", default="mlp", choices=list(zoo.MODELS),
                        help="the zoo model to compile (default: mlp)")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    try:
        model, inputs = zoo.get(args.model)
        graph = step_import(args.model, model, inputs)
        optimized = step_optimize(graph)
        compiled = step_compile(optimized)
        ok = step_check(args.model, model, compiled)
        step_time(model, compiled, inputs)
    except CuvilError as e:
        print(f"cuvil: error: {e}", file=sys.stderr)
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
