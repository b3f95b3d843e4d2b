"""`cuvil optimize MODEL`: the optimized graph and the report of how it was found."""

from __future__ import annotations

import argparse

from cuvil.cli.models import FORMS, load_model


def add_common(p: argparse.ArgumentParser) -> None:
    """Options shared by every command that optimizes a model."""
    p.add_argument("model", metavar="MODEL", help=FORMS)
    p.add_argument("--rules", action="append", metavar="PATH",
                   help=".cvr file or directory, or `stock` (repeatable: --rules stock --rules "
                        "my.cvr extends the stock library; default: the stock library)")
    p.add_argument("--target", action="append", metavar="NAME",
                   help="compile target (repeatable; default: cpu)")
    p.add_argument("--disable", action="append", default=[], metavar="NAME",
                   help="leave out a ruleset or rule (repeatable)")
    p.add_argument("--time-limit", type=float, metavar="S", help="optimization time limit")
    p.add_argument("--static", action="store_true", help="import with static shapes")
    p.add_argument("--no-verify", dest="verify", action="store_false",
                   help="use rules outside the stock library without verifying them first")


def optimized(args: argparse.Namespace, trace: str | None = None):
    """Import the MODEL of `args` and optimize it as the options say."""
    from cuvil.pipeline import optimize

    model, inputs = load_model(args.model)
    limits = {"time": args.time_limit} if args.time_limit else None
    return optimize(model, inputs or None, rules=args.rules, target=args.target or "cpu",
                    limits=limits, dynamic_shapes=False if args.static else None,
                    disable=args.disable, trace=trace, verify=args.verify)


def add_parser(sub) -> None:
    p = sub.add_parser("optimize", help="optimize a model with rewrite rules",
                       description="Apply every rule at once (equality saturation) and print "
                                   "the cheapest equivalent graph with the report.")
    add_common(p)
    p.add_argument("--explain", action="store_true", help="show the rules behind each node")
    p.add_argument("--emit-egglog", metavar="FILE", help="write the generated egglog program")
    p.add_argument("--pass-timing", metavar="FILE", help="write stage timings (Chrome trace)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    graph = optimized(args, trace=args.pass_timing)
    print(graph.to_text())
    print(graph.report)
    if args.explain:
        print(graph.report.explain_all(graph))
    if args.emit_egglog:
        from cuvil.atomic import write_text

        write_text(args.emit_egglog, graph.report.egglog)
        print(f"egglog program written to {args.emit_egglog}")
    return 0
