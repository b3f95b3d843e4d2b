"""`cuvil rules verify|coverage [PATH...]`: prove rules sound, show that they fire.

    cuvil rules verify rules/ --seed 0       each rule on >= 50 random valid instances:
                                             verified (n), UNSOUND + counterexample, or
                                             unverified: reason; exit 1 if any is UNSOUND
    cuvil rules coverage rules/ --models zoo:mlp probe:attention --fail-under 100
                                             per rule: matches, in an extracted graph,
                                             models where it fired; exit 1 under PCT

PATH defaults to the stock library. Bad rule files print their diagnostics, exit 1.
"""

from __future__ import annotations

import argparse
import sys

from cuvil.dsl.diagnostics import CvrError
from cuvil.errors import CuvilError


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "rules", help="verify rules and measure their coverage",
        description="Check that rewrite rules are sound (verify) and that they fire on a "
                    "corpus of models (coverage).")
    sub = parser.add_subparsers(dest="rules_command", metavar="ACTION", required=True)
    verify = sub.add_parser(
        "verify", help="check each rule on random instances of its left-hand side",
        description="Evaluate both sides of each rule on random valid instances of its "
                    "left-hand side (shapes derived from the ops, values f32 unless the "
                    "ops need others) and compare types exactly and values within a "
                    "dtype-aware tolerance. Exit 1 if any rule is UNSOUND.")
    _paths(verify)
    verify.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    verify.add_argument("--instances", type=int, default=50, metavar="N",
                        help="instances per rule (default 50)")
    verify.add_argument("--rule", action="append", default=[], metavar="NAME",
                        help="verify only this rule (repeatable)")
    verify.set_defaults(run=run_verify)
    cov = sub.add_parser(
        "coverage", help="which rules fire on a corpus of models",
        description="Optimize every model of the corpus with the rules and print, per "
                    "rule, its matches, whether it is in an extracted graph and the models "
                    "where it fired. Default corpus: every zoo model and the probe models.")
    _paths(cov)
    cov.add_argument("--models", nargs="+", action="extend", metavar="SPEC",
                     help="zoo:NAME, probe:NAME, a .pt2 file or package.module:factory; "
                          "a later argument that is none of these is a rule PATH")
    cov.add_argument("--fail-under", type=float, metavar="PCT",
                     help="exit 1 if fewer than PCT%% of the rules fired")
    cov.add_argument("--disable", action="append", default=[], metavar="NAME",
                     help="leave out a ruleset or rule (repeatable)")
    cov.set_defaults(run=run_coverage)


def _paths(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help=".cvr file or directory (default: the stock library)")


def _load(paths: list[str]):
    from cuvil.library import load

    return load(list(paths) if paths else None)


def run_verify(args: argparse.Namespace) -> int:
    from cuvil.verify import verify

    if args.instances < 1:
        raise CuvilError("--instances must be at least 1")
    try:
        library = _load(args.paths)
    except CvrError as e:
        print(str(e), file=sys.stderr)
        return 1
    known = {r.name for r in library.rules} | {r.label for r in library.rules}
    missing = [name for name in args.rule if name not in known]
    if missing:
        raise CuvilError(f"no rule named {', '.join(missing)} in the rules given")
    report = verify(library, seed=args.seed, instances=args.instances, only=tuple(args.rule),
                    on_result=lambda result: print(result, flush=True))
    print(report.summary())
    return 0 if report.sound else 1


def _split_models(args: argparse.Namespace) -> None:
    """`--models zoo:mlp my.cvr`: the rule file is a PATH, not a model (`--models` takes
    every argument after it, and a model spec has a colon or ends in `.pt2`)."""
    if not args.models:
        return
    models = [m for m in args.models if ":" in m or m.endswith(".pt2")]
    args.paths = [*args.paths, *(m for m in args.models if m not in models)]
    args.models = models


def run_coverage(args: argparse.Namespace) -> int:
    from cuvil.cli.coverage import coverage

    _split_models(args)
    try:
        _load(args.paths)  # diagnostics first, before any model is imported
    except CvrError as e:
        print(str(e), file=sys.stderr)
        return 1
    report = coverage(list(args.paths) if args.paths else None, args.models,
                      disable=args.disable,
                      on_model=lambda spec, graph: print(
                          f"{spec}: {'optimized' if graph is not None else 'FAILED'}",
                          file=sys.stderr, flush=True))
    print(report)
    if report.failed:
        return 1
    if args.fail_under is not None and report.percent < args.fail_under:
        print(f"coverage {report.percent:.1f}% is under {args.fail_under:g}%")
        return 1
    return 0
