"""The demo (`./dev demo`, `python -m cuvil.demo [MODEL]`): Cuvil on a bundled model, step
by step, in words a newcomer can follow.

Each step is one function that prints what it did and returns what the next step needs;
`main` runs them in order.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

import torch

from cuvil import zoo
from cuvil.errors import CuvilError
from cuvil.ir.graph import Graph

TOLERANCE = 1e-5  # max abs difference accepted against torch eager, in f32
BATCHES = (1, 7)  # two batch sizes, both served by the one imported graph


def step_import(name: str, model: torch.nn.Module, inputs: tuple) -> Graph:
    from cuvil.frontend import from_torch

    graph = from_torch(model, inputs)
    print(f"Step 1 - import. torch.export traced {type(model).__name__} (zoo:{name}); "
          f"Cuvil built a graph of {len(graph)} values:")
    for n in graph.inputs:
        print(f"  input {n}: {graph[n].type}")
    symbols = graph.import_report.dynamic_dims
    if symbols:
        print(f"  {', '.join(symbols)} is symbolic: one graph serves every batch size")
    consts = [n for n in graph if n.op == "const"]
    print(f"  {len(consts)} constants: the model's weights, held by reference (not copied), "
          "and a few prepared at import (transposed weights)")
    ops = Counter(graph.ops())
    print(f"  {sum(ops.values())} operations: "
          + ", ".join(f"{op} x{k}" if k > 1 else op for op, k in ops.most_common()))
    fallbacks = graph.import_report.fallbacks
    print(f"  {len(fallbacks)} op(s) left to torch" if fallbacks
          else "  every operation is in Cuvil's op catalog (none left to torch)")
    return graph


def step_check(name: str, model: torch.nn.Module, graph: Graph) -> bool:
    from cuvil.ops.execute import run

    print("\nStep 2 - check. Run the Cuvil graph with the reference executor and compare "
          "with PyTorch:")
    ok = True
    for batch in BATCHES:
        _, inputs = zoo.get(name, batch=batch)
        with torch.no_grad():
            want = model(*inputs)
        got = run(graph, *inputs)
        err = (got - want).abs().max().item()
        ok &= err <= TOLERANCE
        print(f"  batch {batch}: outputs {tuple(got.shape)}, largest difference {err:.1e} "
              + ("(ok)" if err <= TOLERANCE else f"(MISMATCH: above {TOLERANCE})"))
    return ok


def show_ir(graph: Graph, name: str, lines: int = 8) -> None:
    """The IR's first operations (constants skipped), as `cuvil import` prints them."""
    text = graph.to_text().splitlines()
    ops = [ln for ln in text[1:-2] if " = const(" not in ln]
    print(f"\nThe IR, its first operations (all of it: `cuvil import zoo:{name}`):")
    for line in [text[0], *ops[:lines]]:
        print("  " + (line if len(line) <= 110 else line[:107] + "..."))
    print(f"  ... {len(text) - 1 - lines} more lines (constants, the rest, `return`)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cuvil.demo", description=__doc__)
    parser.add_argument("model", nargs="?", default="cnn", choices=list(zoo.MODELS),
                        help="the zoo model to run (default: cnn)")
    args = parser.parse_args(argv)
    try:
        model, inputs = zoo.get(args.model)
        graph = step_import(args.model, model, inputs)
        ok = step_check(args.model, model, graph)
        show_ir(graph, args.model)
    except CuvilError as e:
        print(f"cuvil: error: {e}", file=sys.stderr)
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
