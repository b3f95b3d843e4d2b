"""Value types of the Cuvil IR: dtypes, (symbolic) dims, layouts, devices.

A dim is a Python `int` or a `sympy` expression over named symbols (`batch`, `2*batch`).
A layout tag is physical only: shapes are always in logical (torch) order. A rank-4 value is
`NCHW` by default, every other rank `contiguous`.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np
import sympy
import torch

from cuvil.errors import IRError
from cuvil.ir.devices import HOST


class DType(StrEnum):
    f32 = "f32"
    f16 = "f16"
    bf16 = "bf16"
    f64 = "f64"
    i8 = "i8"
    u8 = "u8"
    i32 = "i32"
    i64 = "i64"
    bool = "bool"

    @property
    def torch(self) -> torch.dtype:
        return _TORCH[self]

    @property
    def numpy(self) -> np.dtype:
        if self is DType.bf16:
            raise IRError("bf16 has no numpy dtype")
        return np.dtype(_NUMPY[self])

    @property
    def is_float(self) -> bool:
        return self in (DType.f32, DType.f16, DType.bf16, DType.f64)

    @property
    def itemsize(self) -> int:
        return _TORCH[self].itemsize

    @staticmethod
    def from_torch(dtype: torch.dtype) -> DType:
        for d, t in _TORCH.items():
            if t == dtype:
                return d
        raise IRError(f"unsupported torch dtype {dtype}")


_TORCH = {
    DType.f32: torch.float32, DType.f16: torch.float16, DType.bf16: torch.bfloat16,
    DType.f64: torch.float64, DType.i8: torch.int8, DType.u8: torch.uint8,
    DType.i32: torch.int32, DType.i64: torch.int64, DType.bool: torch.bool,
}
_NUMPY = {
    DType.f32: "float32", DType.f16: "float16", DType.f64: "float64", DType.i8: "int8",
    DType.u8: "uint8", DType.i32: "int32", DType.i64: "int64", DType.bool: "bool",
}

Dim = int | sympy.Expr
CONTIGUOUS, NCHW, NHWC = "contiguous", "NCHW", "NHWC"
LAYOUTS = {CONTIGUOUS, NCHW, NHWC}
# The size a symbolic dim is assumed to have wherever one number must stand for it and no
# example input gives one: the cost model, the memory plan's figures, whether a kernel is
# worth a parallel loop, the made-up inputs of a graph dump.
SYMBOLIC_DIM_SIZE = 64


def default_layout(rank: int) -> str:
    return NCHW if rank == 4 else CONTIGUOUS


def dim(value) -> Dim:
    """Normalise a dim: concrete values become `int`, symbolic ones stay `sympy`."""
    if isinstance(value, sympy.Basic):
        value = sympy.sympify(value)
        return int(value) if value.is_Integer else value
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise IRError(f"not a dim: {value!r}")
    return int(value)


def is_static(d: Dim) -> bool:
    return isinstance(d, int)


def numel(shape: tuple[Dim, ...]) -> Dim:
    return dim(math.prod(shape, start=sympy.Integer(1))) if shape else 1


def format_dim(d: Dim) -> str:
    return str(d) if is_static(d) else sympy.sstr(d).replace(" ", "")


_ALLOWED_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Div: "/"}


# Functions a dim may use, with their arity (as sympy prints them).
_DIM_FUNCTIONS = {"floor": (sympy.floor, 1), "ceiling": (sympy.ceiling, 1),
                  "Min": (sympy.Min, 2), "Max": (sympy.Max, 2), "Mod": (sympy.Mod, 2)}


def parse_dim(text: str) -> Dim:
    """Parse `384`, `batch`, `2*batch`, `floor(batch/2)`, `Min(batch,64)` without
    evaluating Python."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise IRError(f"bad dim {text!r}") from e
    return dim(_dim_expr(tree, text))


def _dim_expr(node: ast.AST, text: str) -> sympy.Expr:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return sympy.Integer(node.value)
    if isinstance(node, ast.Name):
        return sympy.Symbol(node.id, integer=True, positive=True)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_dim_expr(node.operand, text)
    if isinstance(node, ast.BinOp) and type(node.op) in _ALLOWED_BINOPS:
        a, b = _dim_expr(node.left, text), _dim_expr(node.right, text)
        match node.op:
            case ast.Add():
                return a + b
            case ast.Sub():
                return a - b
            case ast.Mult():
                return a * b
            case ast.FloorDiv():
                return sympy.floor(a / b)
            case ast.Div():
                return a / b
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and len(node.args) == _DIM_FUNCTIONS.get(node.func.id, (None, -1))[1]):
        fn = _DIM_FUNCTIONS[node.func.id][0]
        return fn(*(_dim_expr(a, text) for a in node.args))
    raise IRError(f"bad dim {text!r}")


def sym(name: str) -> sympy.Symbol:
    """The symbol of a named dynamic dim (positive integer)."""
    return sympy.Symbol(name, integer=True, positive=True)


def eval_dim(d: Dim, env: dict[str, int]) -> int:
    """The concrete size of `d` given the sizes of its symbols."""
    if is_static(d):
        return d
    value = d.subs({sym(k): v for k, v in env.items()})
    if not value.is_Integer:
        raise IRError(f"dim {format_dim(d)} is unknown with {env}")
    return int(value)


@dataclass(frozen=True)
class TensorType:
    """Shape (logical order), dtype, physical layout tag and device tag of a value.

    `weak` marks a number standing for a tensor (a `scalar` node: a Python number in a
    model, a number in a rule). As in torch's promotion, it is weaker than any tensor: its
    dtype counts only when of a higher category (float > int > bool) than the tensors it
    meets, and then as the default dtype of its category. Values computed from it are not
    weak; the text form does not show it (a `scalar` node's type is always weak).
    """

    shape: tuple[Dim, ...]
    dtype: DType
    layout: str = ""
    device: str = HOST
    weak: bool = False

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(dim(d) for d in self.shape))
        object.__setattr__(self, "dtype", DType(self.dtype))
        if not self.layout:
            object.__setattr__(self, "layout", default_layout(len(self.shape)))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> Dim:
        return numel(self.shape)

    @property
    def is_static(self) -> bool:
        return all(is_static(d) for d in self.shape)

    def with_(self, **changes) -> TensorType:
        changes.setdefault("weak", False)
        if "shape" in changes and "layout" not in changes:
            changes["layout"] = default_layout(len(changes["shape"]))
        return replace(self, **changes)

    def concrete_shape(self, env: dict[str, int]) -> tuple[int, ...]:
        return tuple(eval_dim(d, env) for d in self.shape)

    def __str__(self) -> str:
        text = f"{self.dtype}[{','.join(format_dim(d) for d in self.shape)}]"
        if self.layout != default_layout(self.rank):
            text += f":{self.layout}"
        if self.device != HOST:
            text += f"@{self.device}"
        return text

    @staticmethod
    def parse(text: str) -> TensorType:
        text = text.strip()
        device = HOST
        if "@" in text:
            text, device = text.rsplit("@", 1)
        layout = ""
        if text.endswith("]") is False and ":" in text:
            text, layout = text.rsplit(":", 1)
        if "[" not in text or not text.endswith("]"):
            raise IRError(f"bad type {text!r}")
        dtype, dims = text[:-1].split("[", 1)
        try:
            dt = DType(dtype)
        except ValueError as e:
            raise IRError(f"unknown dtype {dtype!r}") from e
        shape = tuple(parse_dim(t) for t in _split_dims(dims))
        return TensorType(shape, dt, layout, device)


def _split_dims(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += {"(": 1, ")": -1}.get(ch, 0)
        cur += ch
    if cur.strip():
        parts.append(cur)
    return parts
