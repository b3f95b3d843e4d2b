"""tests/runtime/test_derived.py: constants lowering declares (`LowerContext.derive`) and the
runtime's build step computes: the int8 recipes give arrays of exactly the declared types
and the values the int8 kernels' Python API prepares; an undeclared format is an error."""

from __future__ import annotations

import numpy as np
import pytest

from cuvil.errors import CuvilError
from cuvil.ir import Graph
from cuvil.lower import qlayer
from cuvil.lower.context import LowerContext
from cuvil.runtime import derived
from cuvil.targets.cpu.kernels import int8
from cuvil.targets.cpu.kernels.quantized import pack_conv_weight, pack_weight


def declared(recipe: str, inputs: dict, k: int, n: int):
    ctx = LowerContext(Graph("derived"), threads=1)
    names = ctx.derive("layer", recipe, qlayer.packed_types(k, n), lambda: inputs)
    return ctx, names


@pytest.mark.parametrize("k, n", [(5, 3), (64, 128), (130, 70), (7, 16)])
def test_int8_gemm_constants_have_the_declared_types_and_the_kernels_values(k, n):
    rng = np.random.default_rng(k * n)
    w = rng.integers(-127, 128, (k, n), dtype=np.int8)
    scale, bias = rng.random(n, np.float32), rng.standard_normal(n).astype(np.float32)
    ctx, names = declared("int8_gemm", {"weight": w, "scale": scale, "bias": bias,
                                        "x_zero": 7}, k, n)
    done: dict = {}
    got = [derived.compute(ctx, v, done) for v in names]
    want = int8.prepare(pack_weight(w, scale).args(bias), 7)[:4]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    assert len(done) == 1  # one recipe call for the four arrays


def test_int8_conv_constants_pack_k_over_kh_kw_c():
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (6, 3, 3, 3), dtype=np.int8)
    scale = rng.random(6, np.float32)
    ctx, names = declared("int8_conv", {"weight": w, "scale": scale, "bias": None,
                                        "x_zero": 0}, 27, 6)
    data = derived.compute(ctx, names[0], {})
    np.testing.assert_array_equal(data, pack_conv_weight(w, scale).data)


def test_a_declaration_the_runtime_cannot_honour_is_an_error():
    w = np.zeros((8, 4), np.int8)
    inputs = {"weight": w, "scale": np.ones(4, np.float32), "bias": None, "x_zero": 0}
    ctx, names = declared("int8_gemm", inputs, 8, 5)  # declared for N=5, given N=4
    with pytest.raises(CuvilError, match="declared"):
        derived.compute(ctx, names[2], {})  # the scales: 4 of them
    ctx, names = declared("int4_gemm", inputs, 8, 4)
    with pytest.raises(CuvilError, match="no runtime recipe 'int4_gemm'"):
        derived.compute(ctx, names[0], {})


def test_the_packing_alignment_lowering_declares_is_the_kernels():
    assert qlayer.PACK_COLUMNS == int8.NARROW and qlayer.MAX_K == int8.MAX_K
