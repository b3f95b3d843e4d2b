"""Constants the runtime computes at build time for lowering's declarations.

A template that needs a constant in a format only the runtime knows (the int8 kernels'
packed weights) declares it with `LowerContext.derive`: a recipe name, its inputs and the
types of the arrays it gives. `compute` runs the recipe of that name, which the target
whose templates declare it registered with its device (`cuvil.ir.devices`), once per
declaration and checks each array against its declared type, so the lowering layer never
imports the kernels and a format change cannot slip past unnoticed. The CPU target's
(`cuvil/targets/cpu/recipes.py`):

    int8_gemm   weight int8 [K, N], scale f32 [N], bias f32 [N] or None, x_zero
                -> qdata (panels), qstart (-x_zero * column sums), qscale (= scale), qbias
    int8_conv   the same for a weight int8 [OC, C, KH, KW] (K over (kh, kw, c))
"""

from __future__ import annotations

import numpy as np

from cuvil import aligned, gc_pause
from cuvil.errors import CuvilError
from cuvil.ir.devices import recipes
from cuvil.lower.context import Derived, LowerContext


def compute(ctx: LowerContext, value: str, done: dict) -> np.ndarray:
    """The array of the derived constant `value`; `done` keeps each declaration's arrays
    (one recipe call gives all its parts)."""
    derived, part = ctx.derived[value]
    key = id(derived)
    if key not in done:
        done[key] = (derived, _run(derived))
    array = done[key][1][part]
    t = ctx.type(value)
    if array.dtype != t.dtype.numpy or tuple(array.shape) != tuple(t.shape):
        raise CuvilError(f"derived constant {value} ({derived.recipe}.{part}) is "
                         f"{array.dtype} {array.shape}, declared {t.dtype} {t.shape}")
    return aligned.contiguous(array)


def _run(derived: Derived) -> dict[str, np.ndarray]:
    known = recipes()
    if derived.recipe not in known:
        raise CuvilError(f"no runtime recipe {derived.recipe!r} for derived constants "
                         f"(known: {', '.join(sorted(known))})")
    with gc_pause.resumed():  # a recipe may compile its Numba drivers
        return known[derived.recipe](**derived.inputs)
