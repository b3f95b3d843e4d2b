"""How the optimizer scales: time and peak memory for the zoo and for transformer stacks.

    .venv/bin/python bench/optimize_scale.py [--rules PATH] [--layers 1 4 12 24]

Optimize time is measured from the imported IR (torch.export is timed separately), the best
of three runs of `optimize_graph` with default options (saturation in a forked worker);
peak memory is the largest resident size of those workers (the optimizer's own).
"""

from __future__ import annotations

import argparse
import resource
import time

import torch

import cuvil
from cuvil import zoo
from cuvil.egraph.optimizer import optimize_graph
from cuvil.library import load
from cuvil.options import CompileOptions


def transformer_stack(layers: int):
    """A BERT-base-shaped encoder (d=768, 12 heads, ffn 3072), dynamic batch."""
    torch.backends.mha.set_fastpath_enabled(False)
    layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True, dropout=0.0)
    model = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()
    return model, (torch.randn(2, 128, 768),)


def measure(name: str, model, inputs, library) -> dict:
    start = time.perf_counter()
    graph = cuvil.from_torch(model, inputs)
    export = time.perf_counter() - start
    seconds = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        out = optimize_graph(graph, library, CompileOptions())
        seconds = min(seconds, time.perf_counter() - start)
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    report = out.report
    return {"model": name, "aten nodes": len(graph.ops()), "export s": export,
            "optimize s": seconds, "e-nodes": report.iterations[-1].size if report.iterations
            else 0, "iterations": len(report.iterations), "stop": report.stop_reason,
            "peak MB": rss / 1024, "nodes after": len(out.ops())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", default=None, help="rules (default: the stock library)")
    parser.add_argument("--layers", type=int, nargs="*", default=[1, 4, 12, 24])
    args = parser.parse_args()
    library = load(args.rules)
    rows = [measure(name, *zoo.get(name), library) for name in zoo.MODELS]
    rows += [measure(f"encoder x{n}", *transformer_stack(n), library) for n in args.layers]
    cols = ["model", "aten nodes", "export s", "optimize s", "e-nodes", "iterations",
            "peak MB", "nodes after", "stop"]
    print(" | ".join(cols))
    for row in rows:
        print(" | ".join(f"{row[c]:.2f}" if isinstance(row[c], float) else str(row[c])
                         for c in cols))
    per_layer = [r["optimize s"] / n for r, n in zip(rows[-len(args.layers):], args.layers,
                                                       strict=True)]
    print("optimize seconds per layer:", ", ".join(f"{s:.3f}" for s in per_layer))


if __name__ == "__main__":
    main()
