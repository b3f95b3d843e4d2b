"""Physical storage of values: layout permutations, dtypes and dims as generated code.

A value's shape is logical (torch order); its storage is a C-contiguous numpy array whose
dims are the logical dims permuted by its layout (`NHWC`: logical dims 0, 2, 3, 1), of its
dtype, bf16 as its bits (`storage`).
"""

from __future__ import annotations

import math

import numpy as np
import sympy
import torch

from cuvil.ir.types import NHWC, SYMBOLIC_DIM_SIZE, Dim, DType, TensorType, is_static

_NP = {DType.f32: "np.float32", DType.f64: "np.float64", DType.i8: "np.int8",
       DType.u8: "np.uint8", DType.i32: "np.int32", DType.i64: "np.int64",
       DType.bool: "np.bool_"}


def kernel_dtype(dtype: DType) -> bool:
    """Whether generated kernels handle this dtype (f16 and bf16 run through torch)."""
    return dtype in _NP


BF16_BITS = np.dtype(np.uint16)  # how a bf16 array is stored


def storage(dtype: DType) -> np.dtype:
    """The numpy dtype a value's array has: its own, or for bf16 (which numpy lacks) its
    bits as uint16, which torch sees as bfloat16 (`to_tensor`)."""
    return BF16_BITS if dtype is DType.bf16 else dtype.numpy


def to_tensor(array: np.ndarray) -> torch.Tensor:
    """The torch tensor over an array: a bf16 one's uint16 bits seen as bfloat16."""
    t = torch.from_numpy(array)
    return t.view(torch.bfloat16) if array.dtype == BF16_BITS else t


def from_tensor(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor's array: a bfloat16 one's bits as uint16 (numpy has no bf16)."""
    return t.view(torch.uint16).numpy() if t.dtype == torch.bfloat16 else t.numpy()


def np_name(dtype: DType) -> str:
    """The dtype as generated code spells it (`np.float32`)."""
    return _NP[dtype]


def layout_perm(t: TensorType) -> tuple[int, ...]:
    """For each physical dim, the logical dim stored there."""
    if t.layout == NHWC and t.rank == 4:
        return (0, 2, 3, 1)
    return tuple(range(t.rank))


def physical_shape(t: TensorType) -> tuple[Dim, ...]:
    return tuple(t.shape[p] for p in layout_perm(t))


def is_identity_layout(t: TensorType) -> bool:
    """Whether storage order equals logical order (a reshape is then a free view)."""
    return layout_perm(t) == tuple(range(t.rank))


def is_one(d: Dim) -> bool:
    return is_static(d) and d == 1


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


def reference_numel(shape: tuple) -> int:
    """Elements of a physical shape with every symbolic dim at `SYMBOLIC_DIM_SIZE` (a
    `threads` dim at 2): what compile-time decisions and memory figures assume."""
    sizes = []
    for d in shape:
        if d == "threads":
            sizes.append(2)
        elif isinstance(d, int):
            sizes.append(d)
        else:
            sizes.append(int(d.subs({s: SYMBOLIC_DIM_SIZE for s in d.free_symbols})))
    return math.prod(sizes)
