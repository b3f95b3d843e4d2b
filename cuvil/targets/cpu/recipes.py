"""The CPU target's derived-constant recipes: constants in a format only its kernels know,
which its templates declare (`LowerContext.derive`) and `cuvil.runtime.derived` computes.

    int8_gemm   weight int8 [K, N], scale f32 [N], bias f32 [N] or None, x_zero
                -> qdata (panels), qstart (-x_zero * column sums), qscale (= scale), qbias
    int8_conv   the same for a weight int8 [OC, C, KH, KW] (K over (kh, kw, c))
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def _int8(pack: str) -> Callable[..., dict]:
    """The recipe that packs with `kernels.quantized`'s function `pack` (the int8 kernels
    are imported by the first graph that needs them)."""
    def recipe(weight, scale, bias, x_zero: int) -> dict[str, np.ndarray]:
        from cuvil.targets.cpu.kernels import quantized
        from cuvil.targets.cpu.kernels.int8 import prepare

        args = getattr(quantized, pack)(weight, scale).args(bias)
        data, start, qscale, qbias, _, _ = prepare(args, x_zero)
        return {"qdata": data, "qstart": start, "qscale": qscale, "qbias": qbias}

    return recipe


RECIPES: dict[str, Callable[..., dict]] = {"int8_gemm": _int8("pack_weight"),
                                            "int8_conv": _int8("pack_conv_weight")}
