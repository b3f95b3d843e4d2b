"""`cuvil explain MODEL [--node N]`: which rules produced each node, and why they hold."""

from __future__ import annotations

import argparse

from cuvil.cli.optimize import add_common, optimized


def add_parser(sub) -> None:
    p = sub.add_parser("explain", help="show the rewrites that produced optimized nodes",
                       description="Optimize MODEL, then print each rewritten node's chain of "
                                   "rules (name, path:line, description).")
    add_common(p)
    p.add_argument("--node", metavar="N", help="only this node of the optimized graph")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    graph = optimized(args)
    if args.node:
        print(graph.report.explain(args.node))
        return 0
    shown = graph.report.explain_all(graph)
    print(shown or "no node was rewritten: the graph is as imported")
    return 0
