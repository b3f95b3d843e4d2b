"""The `.cvr` rule language: grammar (`cvr.lark`), parser, diagnostics, term and guard typing.

    module = cuvil.dsl.parse(text, path="my.cvr")     # syntax only: an `ast.Module`
    library = cuvil.library.load("rules/")               # parsed and checked

Every problem in a `.cvr` source raises `CvrError`, which carries all diagnostics. The
parser (and Lark) is imported on first use: lowering a cached graph reads `ast` alone.
"""

from typing import Any

from cuvil.dsl.diagnostics import CvrError, Diagnostic

__all__ = ["CvrError", "Diagnostic", "parse"]


def __getattr__(name: str) -> Any:
    if name == "parse":
        from cuvil.dsl.parser import parse

        return parse
    raise AttributeError(f"module 'cuvil.dsl' has no attribute {name!r}")
