"""The tiles of the CUDA GEMM and implicit-GEMM convolution
(`cuvil/targets/cuda/templates/tiling.py`): the chooser's choices against its own rule and
the target's limits, and the kernels at small forced tiles (several tiles, ragged edge
tiles) against the reference executor, under the CUDA simulator."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from cuda_support import check, on_cuda, stock_ops
from hypothesis import given, settings
from hypothesis import strategies as st

from cuvil.targets.cuda import PARAMS
from cuvil.targets.cuda.templates import tiling
from cuvil.targets.cuda.templates.tiling import Tile, candidates, choose_tile, tile_cost

FEW = settings(max_examples=2, deadline=None)  # at each of the SMALL tiles
# small tiles, so that tiny shapes span several tiles and end in ragged ones: one
# element a thread, register blocks of rows, of columns, of both; depths 2 to 8
SMALL = [Tile(4, 8, 2, 1, 1), Tile(8, 4, 4, 2, 1), Tile(4, 16, 8, 1, 2), Tile(8, 8, 4, 2, 2)]
PROBLEMS = [(1, 4, 5, 3), (1, 40, 40, 40), (1, 256, 256, 256), (8, 512, 512, 64),
            (1, 1024, 1024, 1024), (1, 32768, 64, 576)]
TIGHT = {**PARAMS, "smem_per_block": 4096, "max_threads_per_block": 128}


@pytest.mark.parametrize("params", [PARAMS, TIGHT], ids=["h200", "tight"])
@pytest.mark.parametrize("problem", PROBLEMS)
def test_choice_fits_the_target_and_is_the_cheapest(params, problem):
    tile = choose_tile(params, problem, 4)
    assert tile.shared_bytes(4) <= params["smem_per_block"]
    assert tile.threads <= params["max_threads_per_block"]
    assert tile.threads % params["warp_size"] == 0
    best = tile_cost(tile, params, problem, 4)
    assert all(best <= tile_cost(t, params, problem, 4) for t in candidates(params, 4))


def test_larger_problems_get_larger_tiles():
    areas = [choose_tile(PARAMS, p, 4).bm * choose_tile(PARAMS, p, 4).bn
             for p in [(1, 4, 5, 3), (1, 256, 256, 256), (1, 4096, 4096, 4096)]]
    assert areas == sorted(areas) and areas[0] < areas[-1]


def test_wider_operands_fit_smaller_tiles():
    """f64 slices take twice the shared memory of f32 ones."""
    assert all(t.shared_bytes(8) <= TIGHT["smem_per_block"] for t in candidates(TIGHT, 8))
    assert len(candidates(TIGHT, 8)) < len(candidates(TIGHT, 4))


def notes(compiled) -> str:
    return "\n".join(k.note for k in compiled.report.kernels)


@contextmanager
def forced(tile: Tile):
    """Every CUDA tile chosen is `tile`, while the context lasts."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tiling, "choose_tile", lambda params, problem, itemsize: tile)
        yield


@pytest.mark.parametrize("tile", SMALL, ids=str)
@FEW
@given(st.integers(1, 19), st.integers(1, 21), st.integers(1, 17),
       st.booleans())
def test_gemm_with_epilogue_at_small_tiles(lower, tile, m, k, n, relu):
    shapes = [(m, k), (k, n), (n,)]

    def build(g, x, w, b):
        y = g.add("add", [g.add("matmul", [x, w]), b])
        return g.add("relu", [y]) if relu else y

    with forced(tile):
        compiled = check(on_cuda(shapes, build), shapes, lower, {"gemm"})
    assert f"tiled {tile}" in notes(compiled)


@pytest.mark.parametrize("tile", SMALL, ids=str)
@FEW
@given(st.integers(1, 3), st.integers(1, 11), st.integers(1, 9),
       st.integers(1, 13))
def test_batched_gemm_at_small_tiles(lower, tile, batch, m, k, n):
    shapes = [(batch, m, k), (batch, k, n)]
    with forced(tile):
        check(on_cuda(shapes, lambda g, x, w: g.add("matmul", [x, w])), shapes, lower,
              {"gemm"})


@pytest.mark.parametrize("tile", SMALL, ids=str)
@FEW
@given(st.integers(1, 13), st.integers(1, 11),
       st.sampled_from(["mv", "vm"]))
def test_vector_products_at_small_tiles(lower, tile, m, k, kind):
    shapes = {"mv": [(m, k), (k,)], "vm": [(k,), (k, m)]}[kind]
    with forced(tile):
        check(on_cuda(shapes, lambda g, x, w: g.add("matmul", [x, w])), shapes, lower,
              {"gemm"})


def conv_attrs(pad: int, stride: int) -> dict:
    return {"stride": [stride, stride], "padding": [pad, pad], "dilation": [1, 1], "groups": 1}


@pytest.mark.parametrize("tile", SMALL, ids=str)
@FEW
@given(st.integers(1, 2), st.integers(1, 5), st.integers(3, 7),
       st.integers(1, 12), st.integers(0, 1), st.integers(1, 2))
def test_conv_with_epilogue_at_small_tiles(lower, tile, batch, cin, hw, cout, pad, stride):
    shapes = [(batch, cin, hw, hw + 1), (cout, cin, 3, 3), (1, cout, 1, 1)]

    def build(g, x, w, b):
        return g.add("relu", [g.add("add", [g.add("conv2d", [x, w], conv_attrs(pad, stride)),
                                           b])])

    with forced(tile):
        compiled = check(on_cuda(shapes, build), shapes, lower, {"conv"})
    assert f"implicit GEMM {tile}" in notes(compiled)


@pytest.mark.parametrize("tile", SMALL, ids=str)
@FEW
@given(st.integers(1, 4), st.integers(4, 7), st.integers(1, 12),
       st.integers(1, 2))
def test_conv_relu_max_pool_at_small_tiles(lower, tile, cin, hw, cout, pool_stride):
    """The pool (a 2x2 window, ragged at odd sizes) runs in the implicit GEMM's kernel."""
    shapes = [(2, cin, hw, hw + 1), (cout, cin, 3, 3), (cout, 1, 1)]
    attrs = {**conv_attrs(1, 1), "kernel_size": [2, 2], "pool_stride": [pool_stride] * 2,
             "pool_padding": [0, 0]}
    g = on_cuda(shapes, lambda g, x, w, b: g.add("conv2d_bias_relu_max_pool", [x, w, b],
                                                 attrs), defs=stock_ops())
    with forced(tile):
        compiled = check(g, shapes, lower, {"conv"})
    assert "pool" not in {k.template for k in compiled.report.kernels}
    assert f"implicit GEMM {tile}" in notes(compiled)
