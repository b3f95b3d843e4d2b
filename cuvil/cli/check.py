"""`cuvil check PATH...`: parse and check `.cvr` rule files and directories.

Clean: a one-line summary on stdout (warnings on stderr), exit 0. Otherwise every
diagnostic on stderr, exit 1. Never a traceback, whatever the input files hold.
"""

from __future__ import annotations

import argparse
import sys

from cuvil.dsl.diagnostics import CvrError


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "check", help="check .cvr rule files",
        description="Parse and check .cvr rule files and directories (every *.cvr under a "
                    "directory, recursively), loaded together as one rule set.")
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="a .cvr file or a directory, or `stock` (the stock library)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from cuvil.library.loader import check  # a snapshot of the op catalog: no torch

    try:
        library = check(list(args.paths))
    except CvrError as e:
        print(str(e), file=sys.stderr)
        print(_count(len(e.errors), "error") + _warnings(len(e.diagnostics) - len(e.errors)),
              file=sys.stderr)
        return 1
    for warning in library.warnings:
        print(warning, file=sys.stderr)
    rules = len({r.name for r in library.rules})  # a `<=>` rule counts once
    print(f"{_count(rules, 'rule')}, {_count(len(library.ops), 'op')}, "
          f"{_count(len(library.rulesets), 'ruleset')} in {_count(len(library.files), 'file')}")
    return 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _warnings(n: int) -> str:
    return f", {_count(n, 'warning')}" if n else ""
