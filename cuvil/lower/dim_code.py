"""Symbolic dims as generated code: a sympy dim expression as a Python/Numba integer
expression over the symbols' variables (`(s0 * 4)`, `(s1 // 2)`).

Its own module so that running a stored program, which needs only `cuvil.lower.physical`,
never imports sympy.
"""

from __future__ import annotations

import sympy

from cuvil.ir.types import Dim, is_static


def dim_code(d: Dim, names: dict[str, str] | None = None) -> str:
    """A dim as a Python/Numba integer expression over the symbols' variables."""
    names = names or {}
    if is_static(d):
        return str(d)
    return _expr(sympy.sympify(d), names)


def _expr(e: sympy.Expr, names: dict[str, str]) -> str:
    if e.is_Integer:
        return str(int(e))
    if e.is_Symbol:
        return names.get(str(e), str(e))
    if isinstance(e, sympy.Add):
        return "(" + " + ".join(_expr(a, names) for a in _ordered(e.args)) + ")"
    if isinstance(e, sympy.Mul):
        num, den = sympy.fraction(e)
        if den != 1:
            raise ValueError(f"dim {e} is not an integer expression")
        return "(" + " * ".join(_expr(a, names) for a in _ordered(e.args)) + ")"
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
        return f"({_expr(e.base, names)} ** {int(e.exp)})"
    if isinstance(e, sympy.floor | sympy.ceiling):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        n, q = _expr(num, names), _expr(den, names)
        return f"({n} // {q})" if isinstance(e, sympy.floor) else f"(-((-{n}) // {q}))"
    if isinstance(e, sympy.Min | sympy.Max):
        fn = "min" if isinstance(e, sympy.Min) else "max"
        return f"{fn}(" + ", ".join(_expr(a, names) for a in _ordered(e.args)) + ")"
    raise ValueError(f"dim {e} has no code form")


def _ordered(args) -> list:
    return sorted(args, key=sympy.default_sort_key)
