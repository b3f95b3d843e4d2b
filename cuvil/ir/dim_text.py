"""Dims as text (`4*batch`, `floor(seq/2)`, as `ir.types.format_dim` prints them), evaluated
exactly without sympy, and the binding of input shapes to the symbols they set.

Both the reference executor (`ops.execute.bind_symbols`) and the compiled call
(`runtime.calling.CallSpec`) bind through `bind_shapes`, so they agree on every size and
every error; the compiled call never imports sympy (the program cache's warm path).
"""

from __future__ import annotations

import ast
import functools
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

from cuvil.errors import CuvilError

Dims = tuple[int | str, ...]  # an int, or a dim's text


def size(d: int | str, env: dict[str, int]) -> int:
    """The size of dim `d` (an int, or its text) given the sizes of its symbols."""
    value = known(d, env)
    if value is None:
        raise CuvilError(f"dim {d} is unknown with {env}")
    return value


def known(d: int | str, env: dict[str, int]) -> int | None:
    """The size of `d`, or None if a symbol it uses is unbound (or it is not whole)."""
    if isinstance(d, int):
        return d
    try:
        value = _evaluator(d)(env)
    except KeyError:
        return None
    return int(value) if value == int(value) else None


Ranges = dict[str, tuple[int | None, int | None]]  # dim -> (least, most); None: unbounded


def bind_shapes(params: Sequence[tuple[str, Dims, str]], shapes: Sequence[tuple[int, ...]],
                dtypes: Sequence[str] | None = None, ranges: Ranges | None = None
                ) -> dict[str, int]:
    """Sizes of the symbolic dims read off the inputs' shapes, for `(name, dims, dtype)`
    params; a `CuvilError` naming the input on any mismatch of rank, size or dtype, or a
    size outside a dim's `ranges` (the sizes torch.export traced the model for)."""
    env: dict[str, int] = {}
    for (name, dims, _), shape in zip(params, shapes, strict=True):
        expect = "[" + ", ".join(str(d) for d in dims) + "]"
        if len(shape) != len(dims):
            raise CuvilError(f"input {name!r}: expected shape {expect}, got {list(shape)}")
        for d, n in zip(dims, shape, strict=True):
            if isinstance(d, str) and d.isidentifier() and d not in env:
                env[d] = int(n)
        for d, n in zip(dims, shape, strict=True):
            if known(d, env) != n:
                bound = ", ".join(f"{k}={v}" for k, v in env.items()) or "all dims static"
                raise CuvilError(f"input {name!r}: expected shape {expect} ({bound}), "
                                 f"got {list(shape)}")
    for (name, _, dtype), dt in zip(params, dtypes or (), strict=False):
        if dt != dtype:
            raise CuvilError(f"input {name!r}: expected dtype {dtype}, got {dt}")
    _check_ranges(params, env, ranges or {})
    return env


def _check_ranges(params: Sequence[tuple[str, Dims, str]], env: dict[str, int],
                  ranges: Ranges) -> None:
    for dim, (least, most) in ranges.items():
        n = env.get(dim)
        if n is None or ((least is None or n >= least) and (most is None or n <= most)):
            continue
        name = next(p for p, dims, _ in params if dim in dims)
        raise CuvilError(f"input {name!r}: {dim} = {n} is outside {range_text(least, most)}, "
                         "the sizes torch.export traced the model for (the dynamic_shapes "
                         "spec's, narrowed where the code branches on the size or where eager "
                         "shares memory differently at size 1); compile "
                         "it with example inputs of this size")


def range_text(least: int | None, most: int | None) -> str:
    """`2..5`, `6..`, `..64`."""
    return f"{'' if least is None else least}..{'' if most is None else most}"


_BINARY = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
           ast.Mult: lambda a, b: a * b, ast.FloorDiv: lambda a, b: a // b,
           ast.Div: Fraction}
_FUNCTIONS = {"floor": math.floor, "ceiling": math.ceil, "Min": min, "Max": max,
              "Mod": lambda a, b: a % b}


@functools.cache
def _evaluator(text: str) -> Callable[[dict], Fraction | int]:
    """`text` as a function of the symbols' sizes, exact (fractions, never floats)."""
    try:
        return _compiled(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError):
        raise CuvilError(f"bad dim {text!r}") from None


def _compiled(node: ast.AST) -> Callable[[dict], Any]:
    match node:
        case ast.Constant(value=int() as v):
            return lambda env: v
        case ast.Name(id=name):
            return lambda env: env[name]
        case ast.UnaryOp(op=ast.USub(), operand=x):
            f = _compiled(x)
            return lambda env: -f(env)
        case ast.BinOp(left=a, op=op, right=b) if type(op) in _BINARY:
            fn, fa, fb = _BINARY[type(op)], _compiled(a), _compiled(b)
            return lambda env: fn(fa(env), fb(env))
        case ast.Call(func=ast.Name(id=name), args=args) if name in _FUNCTIONS:
            fn, parts = _FUNCTIONS[name], [_compiled(a) for a in args]
            return lambda env: fn(*(p(env) for p in parts))
    raise ValueError(ast.dump(node))
