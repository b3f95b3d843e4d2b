"""How a lowered program is called, as plain data: `CallSpec`.

A compiled graph needs, call by call, only this: the inputs' expected shapes (to bind the
symbolic dims and check the rest), the planned buffers and the outputs with their shapes,
and how the outputs are returned. Dims are held as text (`4*batch`, `floor(seq/2)`: the
IR's `format_dim`) and evaluated here exactly, without sympy, so that the program cache
(`cuvil/cache/programs.py`) can rebuild a compiled graph without importing the IR.

    spec = call_spec(graph, program, plan)       # runtime/build.py, at the end of lowering
    env = spec.bind(shapes, dtypes)              # {"batch": 64}, or a clear CuvilError
    buffers = spec.allocate(env, threads)        # one array per planned value
"""

from __future__ import annotations

import ast
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import torch

from cuvil.errors import CuvilError

Dims = tuple[int | str, ...]  # an int, a dim's text, or "threads" (the thread count)
# numpy's dtype names -> the IR's (`ir.types.DType`; a test checks they agree)
DTYPE_NAMES = {"float32": "f32", "float16": "f16", "float64": "f64", "int8": "i8",
               "uint8": "u8", "int32": "i32", "int64": "i64", "bool": "bool"}


@dataclass(frozen=True)
class Param:
    name: str
    shape: Dims  # logical order
    dtype: str  # the IR's name (`f32`)
    perm: tuple[int, ...] | None = None  # for each physical dim, its logical dim (None: same)


@dataclass(frozen=True)
class Array:
    value: str  # the entry's parameter
    shape: Dims  # physical
    dtype: str  # numpy's name
    slot: int = -1  # a planned buffer's slot; -1: an output (a fresh array per call set)
    perm: tuple[int, ...] | None = None  # an output's logical order, as for `Param`


@dataclass(frozen=True)
class CallSpec:
    name: str  # the graph's
    params: tuple[Param, ...]
    buffers: tuple[Array, ...]  # in the entry's order
    outputs: tuple[Array, ...]  # in the entry's order
    slots: tuple[tuple[str, str], ...]  # each slot's (dtype, device)
    symbols: tuple[str, ...]  # the dims `entry` takes as `n_<name>`, in its order
    results: dict[str, str]  # output name -> the entry's output value
    structure: Any  # the graph's output structure (names in tuples, lists and dicts)
    fallbacks: tuple[str, ...] = ()  # nodes run through torch (they need the graph)
    own_containers: bool = False  # outputs in the model's own containers (the graph's tree)

    def bind(self, shapes: list[tuple[int, ...]], dtypes: list[str] | None = None) -> dict:
        """The sizes of the symbolic dims, read off the inputs' logical shapes; a clear
        error on any mismatch."""
        env: dict[str, int] = {}
        for p, shape in zip(self.params, shapes, strict=True):
            expect = "[" + ", ".join(str(d) for d in p.shape) + "]"
            if len(shape) != len(p.shape):
                raise CuvilError(f"input {p.name!r}: expected shape {expect}, got {list(shape)}")
            for d, n in zip(p.shape, shape, strict=True):
                if isinstance(d, str) and d.isidentifier() and d not in env:
                    env[d] = int(n)
            for d, n in zip(p.shape, shape, strict=True):
                if _known(d, env) != n:
                    bound = ", ".join(f"{k}={v}" for k, v in env.items()) or "all dims static"
                    raise CuvilError(f"input {p.name!r}: expected shape {expect} ({bound}), "
                                     f"got {list(shape)}")
        for p, dt in zip(self.params, dtypes or (), strict=False):
            if dt != p.dtype:
                raise CuvilError(f"input {p.name!r}: expected dtype {p.dtype}, got {dt}")
        missing = [s for s in self.symbols if s not in env]
        if missing:
            raise CuvilError(f"dims {', '.join(missing)} are not set by any input shape")
        return env

    def allocate(self, env: dict[str, int], threads: int) -> list:
        """One array per planned buffer, views into slots sized for `env`."""
        sizes = [0] * len(self.slots)
        shapes = [shape_of(b.shape, env, threads) for b in self.buffers]
        for b, shape in zip(self.buffers, shapes, strict=True):
            sizes[b.slot] = max(sizes[b.slot], math.prod(shape))
        slots = [empty(n, dtype, device) for n, (dtype, device) in zip(sizes, self.slots,
                                                                       strict=True)]
        return [slots[b.slot][:math.prod(shape)].reshape(shape)
                for b, shape in zip(self.buffers, shapes, strict=True)]

    def output_shapes(self, env: dict[str, int]) -> list[tuple[tuple[int, ...], np.dtype]]:
        return [(shape_of(o.shape, env), np.dtype(o.dtype)) for o in self.outputs]


def shape_of(dims: Dims, env: dict[str, int], threads: int = 1) -> tuple[int, ...]:
    return tuple(threads if d == "threads" else size(d, env) for d in dims)


def size(d: int | str, env: dict[str, int]) -> int:
    """The size of dim `d` (an int, or its text) given the sizes of its symbols."""
    value = _known(d, env)
    if value is None:
        raise CuvilError(f"dim {d} is unknown with {env}")
    return value


def _known(d: int | str, env: dict[str, int]) -> int | None:
    if isinstance(d, int):
        return d
    try:
        value = _evaluator(d)(env)
    except KeyError:
        return None
    return int(value) if value == int(value) else None


def logical_view(array: np.ndarray, perm: tuple[int, ...]):
    """The torch tensor, in logical dim order, over a physical array."""
    t = torch.from_numpy(array)
    if perm == tuple(range(len(perm))):
        return t
    return t.permute([perm.index(d) for d in range(len(perm))])


def empty(n: int, dtype: str, device: str):
    if device == "cpu":
        return np.empty(n, dtype)
    from cuvil.runtime.cuda import device_empty  # numba.cuda: only for device buffers

    return device_empty(n, np.dtype(dtype))


_BINARY = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
           ast.Mult: lambda a, b: a * b, ast.FloorDiv: lambda a, b: a // b,
           ast.Div: Fraction}
_FUNCTIONS = {"floor": math.floor, "ceiling": math.ceil, "Min": min, "Max": max,
              "Mod": lambda a, b: a % b}


@functools.cache
def _evaluator(text: str) -> Callable[[dict], Fraction | int]:
    """`text` (a dim as the IR prints it) as a function of the symbols' sizes, exact."""
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
