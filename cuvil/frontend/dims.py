"""Symbolic dims: torch's shape symbols (`s77`) renamed after the dims they stand for.

torch.export names its symbols `s0`, `s77`, ...; Cuvil names them after the user's
`torch.export.Dim` (`H`), or `batch` for the default dynamic batch dim. `DimTable` learns the
names from the graph inputs' shapes and translates any size torch computes (`4*s28`,
`FloorDiv(s0, 2)`) into a sympy expression over Cuvil symbols (`4*batch`, `floor(batch/2)`).
"""

from __future__ import annotations

import sympy
import torch
from torch.utils._sympy import functions as tf

from cuvil.errors import CuvilError
from cuvil.ir.types import Dim, dim, sym

# torch's sympy functions, rewritten in plain sympy (the IR's dims use only these).
_PLAIN = [
    (tf.FloorDiv, lambda a, b: sympy.floor(a / b)),
    (tf.CeilDiv, lambda a, b: sympy.ceiling(a / b)),
    (tf.CleanDiv, lambda a, b: a / b),
    (tf.IntTrueDiv, lambda a, b: a / b),
    (tf.PythonMod, sympy.Mod),
    (tf.Mod, sympy.Mod),
    (tf.PowByNatural, lambda a, b: a**b),
    (tf.Max, sympy.Max),
    (tf.Min, sympy.Min),
    (tf.Identity, lambda a: a),
]


class DimTable:
    """Maps torch's shape symbols to named Cuvil symbols; translates sizes."""

    def __init__(self):
        self.names: dict[sympy.Symbol, sympy.Symbol] = {}
        self.origin: dict[str, str] = {}  # Cuvil name -> "x dim 0", for the report

    def learn(self, size: torch.SymInt | int, name: str, origin: str) -> None:
        """Name the symbol behind `size` (one of an input's dims) unless it has a name."""
        expr = _expr(size)
        if not isinstance(expr, sympy.Symbol) or expr in self.names:
            return
        taken = {str(s) for s in self.names.values()}
        if name in taken:
            name = f"{name}_{len(taken)}"
        self.names[expr] = sym(name)
        self.origin[name] = origin

    def dim(self, size) -> Dim:
        """A torch size (int, SymInt, sympy expr) as a Cuvil dim."""
        expr = _expr(size)
        if isinstance(expr, int):
            return expr
        for fn, plain in _PLAIN:
            expr = expr.replace(fn, plain)
        expr = expr.xreplace(self.names)
        unknown = {s for s in expr.free_symbols if s not in self.names.values()}
        if unknown:
            raise CuvilError(f"size {expr} depends on {', '.join(sorted(map(str, unknown)))}, "
                             "which is not an input dim (a data-dependent size?)")
        return dim(expr)

    def shape(self, sizes) -> tuple[Dim, ...]:
        return tuple(self.dim(s) for s in sizes)

    def narrowed(self, ranges: dict, from_two: bool = False
                 ) -> dict[str, tuple[int | None, int | None]]:
        """The input dims whose sizes torch.export narrowed, from its `range_constraints`
        (torch's symbol -> ValueRanges): name -> (least, most), None where unbounded. A
        least of 2 or less is no bound: torch specializes sizes 0 and 1 and traces them as
        2, which Cuvil's graphs serve (`frontend/export.py`), unless `from_two` says the
        program's memory sharing differs at those sizes."""
        found = {}
        for symbol, name in self.names.items():
            r = ranges.get(symbol)
            least = _finite(r.lower) if r is not None else None  # int_oo: no bound
            most = _finite(r.upper) if r is not None else None
            least = 2 if from_two else (least if least is not None and least > 2 else None)
            if (least, most) != (None, None):
                found[str(name)] = (max(least, 2) if from_two else least, most)
        return found


def _finite(bound) -> int | None:
    return int(bound) if isinstance(bound, int | sympy.Integer) else None


def _expr(size) -> int | sympy.Expr:
    if isinstance(size, torch.SymInt):
        expr = size.node.expr
        return int(expr) if expr.is_Integer else expr
    if isinstance(size, sympy.Basic):
        return int(size) if size.is_Integer else size
    if isinstance(size, bool) or not isinstance(size, int):
        raise CuvilError(f"not a size: {size!r}")
    return size
