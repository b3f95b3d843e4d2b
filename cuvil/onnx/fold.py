"""Values known at import: ONNX ops on constants computed with numpy, no graph node.

The exporters write shape arithmetic as ops (`Shape -> Gather -> Unsqueeze -> Concat ->
Reshape`, `ConstantOfShape`, `Range`). Every value such a chain computes is known when the
import runs: a numpy array, whose elements are Cuvil dims (ints or sympy expressions over
the symbolic dims) where a shape flows through it. `FOLD[op](attrs, inputs)` computes one
op on known inputs; `NotFoldable` says it cannot (then the op becomes graph nodes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import sympy

from cuvil.ir.types import Dim, dim, is_static

Attrs = dict[str, Any]


class NotFoldable(Exception):
    """This op on these known values is not computed at import."""


def dims_array(shape: tuple[Dim, ...]) -> np.ndarray:
    """A shape as a 1-d array: int64 when static, else an object array of dims."""
    if all(is_static(d) for d in shape):
        return np.array(shape, dtype=np.int64)
    return np.array(list(shape), dtype=object)


def tidy(arr: Any) -> np.ndarray:
    """An object array back to int64 once every element is a plain integer."""
    arr = np.asarray(arr)
    if arr.dtype != object:
        return arr
    flat = [dim(v) if isinstance(v, sympy.Basic | int | np.integer) else v for v in arr.flat]
    if all(isinstance(v, int) for v in flat):
        return np.array(flat, dtype=np.int64).reshape(arr.shape)
    out = np.empty(arr.shape, dtype=object)
    out.flat[:] = flat
    return out


def is_symbolic(arr: np.ndarray) -> bool:
    return arr.dtype == object


def to_dims(arr: np.ndarray) -> tuple[Dim, ...]:
    """A known 1-d array of sizes as a tuple of dims."""
    return tuple(dim(v if isinstance(v, sympy.Basic) else int(v)) for v in arr.reshape(-1))


def axes_of(attrs: Attrs, inputs: list, index: int, name: str = "axes") -> list[int] | None:
    """The axes of an op that takes them as input `index` (newer opsets) or as attribute."""
    if len(inputs) > index and inputs[index] is not None:
        return [int(a) for a in np.asarray(inputs[index]).reshape(-1)]
    value = attrs.get(name)
    return None if value is None else [int(a) for a in value]


def _positive(axes: list[int], rank: int) -> list[int]:
    return sorted(a % rank for a in axes)


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype != object and b.dtype != object:
        if a.dtype.kind in "iu" and b.dtype.kind in "iu":
            return (np.trunc(a / b)).astype(np.result_type(a, b))
        return a / b
    return tidy(np.frompyfunc(lambda x, y: sympy.floor(sympy.sympify(x) / y), 2, 1)(a, b))


def _cast(attrs: Attrs, xs: list) -> list:
    from onnx import helper

    target = helper.tensor_dtype_to_np_dtype(attrs["to"])
    if is_symbolic(xs[0]):
        if target.kind not in "iu":
            raise NotFoldable
        return [xs[0]]
    return [xs[0].astype(target)]


def _slice(attrs: Attrs, xs: list) -> list:
    data, starts, ends = xs[0], xs[1].reshape(-1), xs[2].reshape(-1)
    axes = axes_of(attrs, xs, 3) or list(range(len(starts)))
    steps = xs[4].reshape(-1) if len(xs) > 4 and xs[4] is not None else [1] * len(starts)
    index = [slice(None)] * data.ndim
    for a, s, e, st in zip(axes, starts, ends, steps, strict=True):
        if is_symbolic(np.asarray([s, e])):
            raise NotFoldable
        index[a % data.ndim] = slice(int(s), int(e), int(st))
    return [data[tuple(index)]]


def _unsqueeze(attrs: Attrs, xs: list) -> list:
    x = xs[0]
    axes = axes_of(attrs, xs, 1)
    for a in _positive(axes, x.ndim + len(axes)):
        x = np.expand_dims(x, a)
    return [x]


def _squeeze(attrs: Attrs, xs: list) -> list:
    axes = axes_of(attrs, xs, 1)
    x = xs[0]
    if axes is None:
        return [np.squeeze(x)]
    return [np.squeeze(x, axis=tuple(_positive(axes, x.ndim)))]


def _reshape(attrs: Attrs, xs: list) -> list:
    if is_symbolic(xs[1]):
        raise NotFoldable
    shape = [int(s) for s in xs[1]]
    if not attrs.get("allowzero", 0):
        shape = [xs[0].shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return [xs[0].reshape(shape)]


def _constant_of_shape(attrs: Attrs, xs: list) -> list:
    from onnx import numpy_helper

    if is_symbolic(xs[0]):
        raise NotFoldable
    value = attrs.get("value")
    fill = numpy_helper.to_array(value).reshape(-1) if value is not None else np.zeros(
        1, np.float32)
    return [np.full(tuple(int(s) for s in xs[0]), fill[0], dtype=fill.dtype)]


def _range(attrs: Attrs, xs: list) -> list:
    start, limit, delta = (np.asarray(x).item() for x in xs)
    if any(isinstance(v, sympy.Basic) for v in (start, limit, delta)):
        raise NotFoldable
    return [np.arange(start, limit, delta, dtype=np.asarray(xs[0]).dtype)]


def _expand(attrs: Attrs, xs: list) -> list:
    if is_symbolic(xs[1]):
        raise NotFoldable
    shape = np.broadcast_shapes(xs[0].shape, tuple(int(s) for s in xs[1]))
    return [np.broadcast_to(xs[0], shape).copy()]


def _same(x: Any, y: Any) -> bool:
    """Whether two sizes are equal: a symbolic dim (positive) is never a number below 1;
    two expressions that differ in form may be equal for some sizes (`NotFoldable`)."""
    if isinstance(x, sympy.Basic) or isinstance(y, sympy.Basic):
        x, y = sympy.sympify(x), sympy.sympify(y)
        if x == y:
            return True
        if any(v.is_Integer and v < 1 for v in (x, y)):
            return False
        raise NotFoldable
    return bool(x == y)


def _equal(attrs: Attrs, xs: list) -> list:
    if not any(is_symbolic(x) for x in xs):
        return [np.equal(xs[0], xs[1])]
    a, b = np.broadcast_arrays(*(np.asarray(x, dtype=object) for x in xs))
    return [np.array([_same(x, y) for x, y in zip(a.flat, b.flat, strict=True)],
                     dtype=bool).reshape(a.shape)]


def _binary(fn: Callable) -> Callable:
    return lambda attrs, xs: [tidy(fn(xs[0], xs[1]))]


def _unary(fn: Callable) -> Callable:
    return lambda attrs, xs: [tidy(fn(xs[0]))]


def _symbolic_safe(fn: Callable) -> Callable:
    """An op numpy cannot compute on sympy elements: refused on symbolic inputs."""

    def run(attrs: Attrs, xs: list) -> list:
        if any(x is not None and is_symbolic(x) for x in xs):
            raise NotFoldable
        return fn(attrs, xs)

    return run


FOLD: dict[str, Callable[[Attrs, list], list]] = {
    "Identity": lambda attrs, xs: [xs[0]],
    "Cast": _cast,
    "Gather": lambda attrs, xs: [np.take(xs[0], xs[1], axis=attrs.get("axis", 0))],
    "GatherElements": lambda attrs, xs: [np.take_along_axis(xs[0], xs[1],
                                                            axis=attrs.get("axis", 0))],
    "IsNaN": _symbolic_safe(_unary(np.isnan)),
    "Concat": lambda attrs, xs: [tidy(np.concatenate([np.asarray(x, dtype=object)
                                                      if any(is_symbolic(y) for y in xs)
                                                      else x for x in xs],
                                                     axis=attrs["axis"]))],
    "Slice": _slice, "Unsqueeze": _unsqueeze, "Squeeze": _squeeze, "Reshape": _reshape,
    "Transpose": lambda attrs, xs: [np.transpose(xs[0], attrs.get("perm"))],
    "ConstantOfShape": _constant_of_shape, "Range": _range, "Expand": _expand,
    "Add": _binary(np.add), "Sub": _binary(np.subtract), "Mul": _binary(np.multiply),
    "Div": _binary(_int_div), "Neg": _unary(np.negative),
    "Equal": _equal, "Less": _symbolic_safe(_binary(np.less)),
    "Greater": _symbolic_safe(_binary(np.greater)), "Not": _unary(np.logical_not),
    "And": _binary(np.logical_and), "Or": _binary(np.logical_or),
    "Where": lambda attrs, xs: [tidy(np.where(xs[0], xs[1], xs[2]))],
    "Min": _symbolic_safe(lambda attrs, xs: [np.minimum.reduce(np.broadcast_arrays(*xs))]),
    "Max": _symbolic_safe(lambda attrs, xs: [np.maximum.reduce(np.broadcast_arrays(*xs))]),
}
