"""The error types every part of Cuvil raises for bad input.

A `CuvilError` is a user error: the CLI prints its message on one line and exits non-zero,
never with a traceback. Each subclass names the place it is about (a `file:line:col`, an op
and its source line).
"""

from __future__ import annotations


class CuvilError(Exception):
    """Base of every error caused by user input (models, rules, graphs, options)."""


class IRError(CuvilError):
    """A malformed Cuvil graph: the message names the node."""


class UnsupportedOpsError(CuvilError):
    """An import with `strict=True` met ops the catalog lacks; lists every one of them."""

    def __init__(self, unsupported: list[tuple[str, str]]):
        self.unsupported = unsupported
        lines = [f"{op} at {where}" for op, where in unsupported]
        super().__init__(
            f"{len(unsupported)} unsupported op(s): " + "; ".join(lines)
        )


class ShapeError(CuvilError):
    """Shapes or dtypes that an op cannot accept."""
