"""The `cuvil` command line: one module per subcommand, each with `add_parser` and `run`.

User errors (`CuvilError`) print one line on stderr and exit 1; never a traceback. A
long compile says what it is doing: on a terminal with a progress bar, elsewhere (a CI
log, a pipe) with the `cuvil` logger's lines on stderr (`progress_lines`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from contextlib import contextmanager

from cuvil import __version__
from cuvil.cli import cache, check, dump, explain, export, import_, optimize, rules
from cuvil.errors import CuvilError

# The subcommands' modules, in the order `--help` lists them.
COMMANDS = [import_, check, optimize, explain, dump, export, rules, cache]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cuvil", description="Compile PyTorch models with declarative rewrite rules.")
    parser.add_argument("--version", action="version", version=f"cuvil {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS:
        module.add_parser(sub)
    return parser


@contextmanager
def progress_lines(stream=None):
    """While a command runs, the `cuvil` logger's INFO lines (one per stage of a compile
    past a second) go to `stream` (stderr), unless it is a terminal, where the progress
    bar shows them, or the logger has a handler already (the caller's configuration wins)."""
    stream = stream if stream is not None else sys.stderr
    logger = logging.getLogger("cuvil")
    if logger.handlers or stream.isatty():
        yield
        return
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(level or logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        with progress_lines():
            return args.run(args) or 0
    except CuvilError as e:
        # A `.cvr` error (it carries diagnostics) is already `path:line:col: error: ...` lines.
        print(e if getattr(e, "diagnostics", None) else f"cuvil: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
