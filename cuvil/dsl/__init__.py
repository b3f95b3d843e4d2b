"""The `.cvr` rule language: grammar (`cvr.lark`), parser, diagnostics, term and guard typing.

    module = cuvil.dsl.parse(text, path="my.cvr")     # syntax only: an `ast.Module`
    library = cuvil.rules.load("rules/")               # parsed and checked

Every problem in a `.cvr` source raises `CvrError`, which carries all diagnostics.
"""

from cuvil.dsl.diagnostics import CvrError, Diagnostic
from cuvil.dsl.parser import parse

__all__ = ["CvrError", "Diagnostic", "parse"]
