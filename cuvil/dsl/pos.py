"""A place in a `.cvr` source, `path:line:col`: what every AST node and diagnostic carries.

Its own module so that reading and hashing sources (`sources`, `diagnostics`, the compile
caches' keys) does not import the AST's many dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pos:
    path: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"

    @property
    def where(self) -> str:
        """`path:line`, the form provenance and generated code cite."""
        return f"{self.path}:{self.line}"
