"""Element expressions: an elementwise op's value at one element, written once on its `OpDef`.

`OpDef.element` is a Python expression over the op's input names and attribute names:
numbers, `+ - * / **`, comparisons, `&`, `|` and `not` (logical, on truth values),
`a if c else b`, and the functions in `FUNCTIONS`. From that one text come the op's torch
reference (`evaluate`) and its kernel code (`render`, which the lowering calls with its own
spelling of names, numbers and functions), so the semantics `rules verify` checks and the
kernel that runs cannot drift.

    relu:    "max(x, 0)"
    silu:    "x * sigmoid(x)"
    where:   "x if cond else y"
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

import torch

from cuvil.errors import CuvilError


def _maximum(a: Any, b: Any) -> Any:
    if not isinstance(a, torch.Tensor):
        a, b = b, a
    return torch.clamp(a, min=b) if not isinstance(b, torch.Tensor) else torch.maximum(a, b)


def _minimum(a: Any, b: Any) -> Any:
    if not isinstance(a, torch.Tensor):
        a, b = b, a
    return torch.clamp(a, max=b) if not isinstance(b, torch.Tensor) else torch.minimum(a, b)


# The functions an element expression may call, with their torch meaning.
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "tanh": torch.tanh,
    "erf": torch.erf, "sigmoid": torch.sigmoid, "abs": torch.abs, "sin": torch.sin,
    "cos": torch.cos,
    "max": _maximum, "min": _minimum,
}
BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**",
          ast.BitAnd: "&", ast.BitOr: "|"}
COMPARE = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">",
           ast.GtE: ">="}


@cache
def parse(text: str, names: tuple[str, ...]) -> ast.expr:
    """The checked syntax tree of `text`, whose free names must be among `names`."""
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise CuvilError(f"element expression {text!r}: {e.msg}") from None
    for node in ast.walk(tree):
        _check(node, text, names)
    return tree


def _check(node: ast.AST, text: str, names: tuple[str, ...]) -> None:
    where = f"element expression {text!r}"
    match node:
        case ast.Call(func=ast.Name(id=fn), keywords=[]) if fn in FUNCTIONS:
            return
        case ast.Call():
            raise CuvilError(f"{where}: calls must be one of {', '.join(FUNCTIONS)}")
        case ast.Name(id=name) if name not in names and name not in FUNCTIONS:
            raise CuvilError(f"{where}: unknown name {name!r}")
        case ast.Constant(value=v) if not isinstance(v, int | float) or isinstance(v, bool):
            raise CuvilError(f"{where}: only numbers may be written as constants")
        case ast.BinOp(op=op) if type(op) not in BINARY:
            raise CuvilError(f"{where}: unsupported operator {type(op).__name__}")
        case ast.Compare(ops=ops) if len(ops) != 1 or type(ops[0]) not in COMPARE:
            raise CuvilError(f"{where}: one comparison at a time")
        case ast.UnaryOp(op=op) if not isinstance(op, ast.USub | ast.Not):
            raise CuvilError(f"{where}: unsupported operator {type(op).__name__}")
        case ast.BoolOp() | ast.Lambda() | ast.Attribute() | ast.Subscript():
            raise CuvilError(f"{where}: unsupported syntax {type(node).__name__}")


def evaluate(text: str, values: Mapping[str, Any]) -> Any:
    """`text` computed with torch, names bound to `values` (tensors, attribute values)."""
    return _eval(parse(text, tuple(values)), values)


def _eval(e: ast.expr, env: Mapping[str, Any]) -> Any:
    match e:
        case ast.Constant(value=v):
            return v
        case ast.Name(id=name):
            return env[name]
        case ast.Call(func=ast.Name(id=fn), args=args):
            return FUNCTIONS[fn](*(_eval(a, env) for a in args))
        case ast.UnaryOp(op=ast.USub(), operand=x):
            return -_eval(x, env)
        case ast.UnaryOp(operand=x):
            return torch.logical_not(torch.as_tensor(_eval(x, env)))
        case ast.BinOp(left=a, op=op, right=b):
            x, y = _eval(a, env), _eval(b, env)
            return {ast.Add: lambda: x + y, ast.Sub: lambda: x - y, ast.Mult: lambda: x * y,
                    ast.Div: lambda: x / y, ast.Pow: lambda: x ** y,
                    ast.BitAnd: lambda: torch.logical_and(torch.as_tensor(x), y),
                    ast.BitOr: lambda: torch.logical_or(torch.as_tensor(x), y)}[type(op)]()
        case ast.Compare(left=a, ops=[op], comparators=[b]):
            x, y = _eval(a, env), _eval(b, env)
            return {ast.Eq: torch.eq, ast.NotEq: torch.ne, ast.Lt: torch.lt, ast.LtE: torch.le,
                    ast.Gt: torch.gt, ast.GtE: torch.ge}[type(op)](torch.as_tensor(x), y)
        case ast.IfExp(test=c, body=a, orelse=b):
            x, y = _eval(a, env), _eval(b, env)
            return torch.where(_eval(c, env), torch.as_tensor(x), torch.as_tensor(y))
    raise AssertionError(ast.dump(e))


def is_comparison(text: str, names: tuple[str, ...]) -> bool:
    """Whether the expression's value is a comparison (its operands compare in their
    common dtype)."""
    return isinstance(parse(text, names), ast.Compare)


def truth_values(text: str, names: tuple[str, ...]) -> set[str]:
    """The names used as truth values: operands of `&`, `|`, `not` and conditions."""
    found = set()
    for node in ast.walk(parse(text, names)):
        match node:
            case ast.BinOp(op=ast.BitAnd() | ast.BitOr(), left=a, right=b):
                found |= {x.id for x in (a, b) if isinstance(x, ast.Name)}
            case ast.UnaryOp(op=ast.Not(), operand=ast.Name(id=n)) | \
                    ast.IfExp(test=ast.Name(id=n)):
                found.add(n)
    return found


Spell = Callable[[str], str]


def render(text: str, names: tuple[str, ...], name: Spell, number: Callable[[Any], str],
           call: Callable[[str, list[str]], str]) -> str:
    """`text` as Python source, each name, number and function call spelled by the
    caller (a kernel's argument, a typed literal, a vectorizable math call)."""

    def go(e: ast.expr) -> str:
        match e:
            case ast.Constant(value=v):
                return number(v)
            case ast.Name(id=n):
                return name(n)
            case ast.Call(func=ast.Name(id=fn), args=args):
                return call(fn, [go(a) for a in args])
            case ast.UnaryOp(op=ast.USub(), operand=x):
                return f"(-{go(x)})"
            case ast.UnaryOp(operand=x):
                return f"(not {go(x)})"
            case ast.BinOp(left=a, op=op, right=b):
                return f"({go(a)} {BINARY[type(op)]} {go(b)})"
            case ast.Compare(left=a, ops=[op], comparators=[b]):
                return f"({go(a)} {COMPARE[type(op)]} {go(b)})"
            case ast.IfExp(test=c, body=a, orelse=b):
                return f"({go(a)} if {go(c)} else {go(b)})"
        raise AssertionError(ast.dump(e))

    return go(parse(text, names))
