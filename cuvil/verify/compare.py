"""Do the two sides agree? Types exactly, values within a dtype-aware tolerance.

Shape, dtype, layout and device must be equal (`TensorType` equality; the layout and device
come from type inference, since the reference implementations treat them as tags). Values:
integers and booleans exactly; floats elementwise within

    |left - right| <= atol * scale + rtol * |left|

where `scale` is the largest finite magnitude among the inputs and every intermediate value
of the left side (at least 1): a sound rewrite that reassociates or folds a computation
changes its rounding by a few ulps *of the values it went through*, not of its result, which
may be small after cancellation. `rtol` and `atol` are those of the least precise float
dtype among the inputs and the left side's values (an f64 result computed from an f32
intermediate is only f32-exact); a right side that computes in a lower precision than the
left does not widen them. NaN must meet NaN and an infinity the same infinity.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from cuvil.ir.types import DType, TensorType

# dtype -> (rtol, atol): a few hundred ulps, room for a reordered sum of ~100 terms
TOLERANCES = {DType.f32: (1e-4, 1e-5), DType.f64: (1e-9, 1e-12), DType.f16: (1e-2, 1e-3),
              DType.bf16: (3e-2, 1e-2)}


@dataclass(frozen=True)
class Mismatch:
    """How the two sides differ on one instance; `error` is inf for a type difference."""

    what: str
    error: float = math.inf


def compare_types(left: TensorType, right: TensorType) -> Mismatch | None:
    if left == right:
        return None
    return Mismatch(f"the sides differ in type: left {left}, right {right}"
                    + _tags(left, right))


def _tags(left: TensorType, right: TensorType) -> str:
    parts = [f"{name} {getattr(left, name)} vs {getattr(right, name)}"
             for name in ("layout", "device", "weak")
             if getattr(left, name) != getattr(right, name)]
    return f" ({', '.join(parts)})" if parts else ""


def magnitude(tensors: Iterable[torch.Tensor]) -> float:
    """The largest finite absolute value among float tensors, at least 1."""
    biggest = 1.0
    for t in tensors:
        if t.is_floating_point() and t.numel():
            finite = t.detach().abs()[torch.isfinite(t)]
            if finite.numel():
                biggest = max(biggest, float(finite.max()))
    return biggest


def tolerance(tensors: Iterable[torch.Tensor]) -> tuple[float, float]:
    """(rtol, atol) of the least precise float dtype among `tensors`."""
    floats = [TOLERANCES.get(DType.from_torch(t.dtype), TOLERANCES[DType.f32])
              for t in tensors if t.is_floating_point()]
    return max(floats, default=(0.0, 0.0))


def compare_values(left: torch.Tensor, right: torch.Tensor, tol: tuple[float, float],
                   scale: float) -> Mismatch | None:
    """Where `left` and `right` differ by more than `tol` = (rtol, atol) at `scale`."""
    if tuple(left.shape) != tuple(right.shape) or left.dtype != right.dtype:
        return Mismatch(f"the values differ in shape or dtype: left {left.dtype} "
                        f"{list(left.shape)}, right {right.dtype} {list(right.shape)}")
    if not left.numel():
        return None
    if not left.is_floating_point():
        bad = left != right
        error = (left.double() - right.double()).abs()
    else:
        a, b = left.double(), right.double()
        rtol, atol = tol
        finite = torch.isfinite(a) & torch.isfinite(b)
        same_special = (torch.isnan(a) & torch.isnan(b)) | (a == b)
        error = torch.where(finite, (a - b).abs(), torch.where(same_special, 0.0, math.inf))
        bad = error > atol * scale + rtol * torch.where(finite, a.abs(), 0.0)
    if not bool(bad.any()):
        return None
    worst = torch.where(bad, error, -1.0).flatten().argmax().item()
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), left.shape))
    max_error = float(error.max())
    return Mismatch(f"max error {max_error:.4g}; at {index}: left {_item(left, index)}, "
                    f"right {_item(right, index)}", max_error)


def _item(t: torch.Tensor, index: tuple[int, ...]) -> str:
    value = t[index].item()
    return f"{value:.6g}" if isinstance(value, float) else str(value)
