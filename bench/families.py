"""What each fusion family contributes: every zoo model compiled with the stock rules, then
with one family turned off at a time, timed side by side in one process.

    .venv/bin/python bench/families.py [--models mlp,cnn] [--markdown]

Families are the stock rulesets `fusion_linear`, `fusion_conv`, `fusion_activations`,
`fusion_normalization`, `fusion_attention` and `layout`, plus lowering's own merging of
elementwise chains (`fuse_elementwise`). Only families whose rules are in a model's
optimized graph are turned off for it (the others cannot change it). Latencies use
`bench/models.py`'s alternating blocks; `x all` is latency over the all-rules compile
(above 1: the family helps by that factor).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from models import CASES, block_times, machine  # noqa: E402

import cuvil  # noqa: E402
from cuvil import zoo  # noqa: E402

FAMILIES = ("fusion_linear", "fusion_conv", "fusion_activations", "fusion_normalization",
            "fusion_attention", "layout")


def families_in(compiled) -> list[str]:
    report = compiled.report.optimizer
    used = {stat.label for stat in report.rules.values() if stat.in_result}
    rulesets = {r.label: r.ruleset for r in cuvil.library.load(None).rules}
    return [f for f in FAMILIES if any(rulesets.get(label) == f for label in used)]


def run_model(label: str, seconds: float) -> list[dict]:
    name, sizes = CASES[label]
    model, inputs = zoo.get(name, **sizes)
    variants = {"all rules": cuvil.compile(model, inputs)}
    for family in families_in(variants["all rules"]):
        variants[f"without {family}"] = cuvil.compile(model, inputs, disable=[family])
    variants["without elementwise merging"] = cuvil.compile(model, inputs,
                                                             fuse_elementwise=False)
    with torch.no_grad():
        fns = {"eager": lambda: model(*inputs)}
        fns.update({k: (lambda c=c: c(*inputs)) for k, c in variants.items()})
        times = block_times(fns, seconds, rounds=3)
    base = times["all rules"]
    return [{"model": label, "variant": k, "ms": v * 1e3, "x all": v / base,
             "x eager": v / times["eager"]} for k, v in times.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(CASES))
    parser.add_argument("--seconds", type=float, default=6.0, help="timing per model")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    rows = [r for label in args.models.split(",") for r in run_model(label, args.seconds)]
    sep = " | "
    print(machine())
    print(("| " if args.markdown else "") + sep.join(["model", "variant", "median ms",
                                                       "x all rules", "x eager"])
          + (" |" if args.markdown else ""))
    if args.markdown:
        print("|---|---|---|---|---|")
    for r in rows:
        cells = [r["model"], r["variant"], f"{r['ms']:.3f}", f"{r['x all']:.2f}",
                 f"{r['x eager']:.2f}"]
        print(("| " if args.markdown else "") + sep.join(cells) + (" |" if args.markdown else ""))


if __name__ == "__main__":
    main()
