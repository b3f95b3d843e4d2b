"""Constants the runtime computes at build time for lowering's declarations.

A template that needs a constant in a format only the runtime knows (the int8 kernels'
packed weights) declares it with `LowerContext.derive`: a recipe name, its inputs and the
types of the arrays it gives. `compute` runs the recipe of `RECIPES` once per declaration
and checks each array against its declared type, so the lowering layer never imports the
runtime and a format change cannot slip past unnoticed.

    int8_gemm   weight int8 [K, N], scale f32 [N], bias f32 [N] or None, x_zero
                -> qdata (panels), qstart (-x_zero * column sums), qscale (= scale), qbias
    int8_conv   the same for a weight int8 [OC, C, KH, KW] (K over (kh, kw, c))
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from cuvil import aligned, gc_pause
from cuvil.errors import CuvilError
from cuvil.lower.context import Derived, LowerContext


def _int8(pack: str) -> Callable[..., dict]:
    """The recipe that packs with `cuvil.runtime.quantized`'s function `pack` (the int8
    runtime is imported by the first graph that needs it)."""
    def recipe(weight, scale, bias, x_zero: int) -> dict[str, np.ndarray]:
        from cuvil.runtime import quantized
        from cuvil.runtime.int8 import prepare

        args = getattr(quantized, pack)(weight, scale).args(bias)
        data, start, qscale, qbias, _, _ = prepare(args, x_zero)
        return {"qdata": data, "qstart": start, "qscale": qscale, "qbias": qbias}

    return recipe


RECIPES: dict[str, Callable[..., dict]] = {"int8_gemm": _int8("pack_weight"),
                                            "int8_conv": _int8("pack_conv_weight")}


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
    if derived.recipe not in RECIPES:
        raise CuvilError(f"no runtime recipe {derived.recipe!r} for derived constants "
                         f"(known: {', '.join(sorted(RECIPES))})")
    with gc_pause.resumed():  # a recipe may compile its Numba drivers
        return RECIPES[derived.recipe](**derived.inputs)
