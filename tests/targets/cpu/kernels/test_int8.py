"""The int8 kernels (`kernels.int8`, `kernels.quantized`) against numpy and
torch references: exact int32 sums, dequantized and requantized epilogues, s8 and u8
activations, every panel and row-tile shape, threads, convolutions, each micro-kernel
flavour (AVX-512 VNNI, AVX-VNNI, plain vector IR), and one-line errors."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from numba import njit

from cuvil.errors import CuvilError
from cuvil.targets.cpu.kernels import int8_tile
from cuvil.targets.cpu.kernels.quantized import (
    pack_conv_weight,
    pack_weight,
    qconv2d,
    qgemm,
    quantize,
)


def _data(m, k, n, dtype="u8", seed=0):
    rng = np.random.default_rng(seed)
    lo, hi, t = (0, 256, np.uint8) if dtype == "u8" else (-128, 128, np.int8)
    return rng.integers(lo, hi, (m, k), dtype=t), rng.integers(-128, 128, (k, n), dtype=np.int8)


def _sums(xq, zx, wq):
    return (xq.astype(np.int64) - zx) @ wq.astype(np.int64)


@given(m=st.integers(1, 40), k=st.integers(1, 300), n=st.integers(1, 150),
       dtype=st.sampled_from(["u8", "s8"]), zero=st.integers(-128, 255))
def test_int32_sums_are_exact(m, k, n, dtype, zero):
    """Unit scales and no bias: the output is float32(the int32 sum), exactly."""
    xq, wq = _data(m, k, n, dtype, seed=m * k + n)
    zero = zero % 256 if dtype == "u8" else (zero + 128) % 256 - 128
    y = qgemm(xq, 1.0, zero, pack_weight(wq, 1.0), threads=1)
    assert np.array_equal(y, _sums(xq, zero, wq).astype(np.float32))


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (1, 1024, 1024), (7, 13, 70), (9, 64, 1),
                                   (32, 256, 256), (6, 4, 64), (13, 255, 97), (256, 64, 80)])
def test_panel_and_row_tile_shapes(m, k, n):
    """K not a multiple of 4, M = 1, N = 1, tail rows taken by 1-row and clamped 6-row
    tiles, wide (64) and narrow (16) panels, a partial last panel."""
    xq, wq = _data(m, k, n, seed=k)
    y = qgemm(xq, 1.0, 3, pack_weight(wq, 1.0), threads=1)
    assert np.array_equal(y, _sums(xq, 3, wq).astype(np.float32))


def test_zero_k_gives_the_bias():
    xq, wq = _data(3, 0, 5)
    y = qgemm(xq, 0.1, 7, pack_weight(wq, 0.5), bias=np.arange(5), threads=1)
    assert np.array_equal(y, np.broadcast_to(np.arange(5, dtype=np.float32), (3, 5)))


@pytest.mark.parametrize("dtype,zero", [("u8", 131), ("s8", 0), ("s8", -5)])
@pytest.mark.parametrize("relu", [False, True])
def test_dequantize_bias_relu(dtype, zero, relu):
    xq, wq = _data(37, 300, 130, dtype, seed=1)
    rng = np.random.default_rng(2)
    w_scale = rng.uniform(0.001, 0.01, 130).astype(np.float32)
    bias = rng.normal(size=130).astype(np.float32)
    y = qgemm(xq, 0.02, zero, pack_weight(wq, w_scale), bias=bias, relu=relu, threads=1)
    ref = _sums(xq, zero, wq) * (0.02 * w_scale.astype(np.float64)) + bias
    ref = np.maximum(ref, 0) if relu else ref
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("out_dtype,out_zero", [("u8", 100), ("s8", 0), ("s8", 10)])
@pytest.mark.parametrize("relu", [False, True])
def test_requantize_epilogue(out_dtype, out_zero, relu):
    """Within one level of numpy's float32 requantization (ties may round either way),
    equal almost everywhere, and clamped to the type's range."""
    xq, wq = _data(20, 100, 90, seed=3)
    w = pack_weight(wq, np.linspace(0.001, 0.003, 90))
    out_scale = 0.004
    q = qgemm(xq, 0.01, 128, w, bias=0.5, relu=relu, out_scale=out_scale, out_zero=out_zero,
              out_dtype=out_dtype, threads=1)
    y = (_sums(xq, 128, wq) * (0.01 * w.scale.astype(np.float64)) + 0.5).astype(np.float32)
    y = np.maximum(y, 0) if relu else y
    lo, hi = (0, 255) if out_dtype == "u8" else (-128, 127)
    ref = np.clip(np.rint(y / np.float32(out_scale)) + out_zero, lo, hi)
    assert q.dtype == (np.uint8 if out_dtype == "u8" else np.int8)
    diff = np.abs(q.astype(np.int64) - ref)
    assert diff.max() <= 1 and (diff == 0).mean() > 0.99
    assert (q == hi).any() and (q == (out_zero if relu else lo)).any()  # saturated ends


@pytest.mark.parametrize("m,k,n", [(256, 256, 64), (2, 1024, 256), (1, 512, 1000)])
def test_threads_split_rows_or_panels_with_the_same_result(m, k, n):
    xq, wq = _data(m, k, n, seed=4)
    w = pack_weight(wq, 0.01)
    one = qgemm(xq, 0.1, 9, w, threads=1)
    two = qgemm(xq, 0.1, 9, w, threads=2)
    assert np.array_equal(one, two)
    np.testing.assert_allclose(two, _sums(xq, 9, wq) * 0.001, rtol=1e-5, atol=1e-3)


def test_strided_rows_and_quantize():
    """Rows of any stride (a column slice of a wider buffer), and `quantize` against
    numpy's rint(x / scale) + zero, clamped."""
    x = np.random.default_rng(5).normal(size=(11, 40)).astype(np.float32) * 3
    q = quantize(x, 0.03, 128, "u8")
    ref = np.clip(np.rint(x / np.float32(0.03)) + 128, 0, 255)
    assert np.abs(q - ref).max() <= 1 and (q == ref).mean() > 0.99
    wide = np.zeros((11, 64), np.uint8)
    wide[:, 3:43] = q
    wq = _data(1, 40, 20)[1]
    y = qgemm(wide[:, 3:43], 1.0, 128, pack_weight(wq, 1.0), threads=1)
    assert np.array_equal(y, _sums(q, 128, wq).astype(np.float32))


def _conv_ref(xq, zx, wq, x_scale, w_scale, bias, stride, padding, dilation):
    x = torch.from_numpy(xq.astype(np.float64) - zx)
    acc = torch.nn.functional.conv2d(x, torch.from_numpy(wq.astype(np.float64)), None, stride,
                                     padding, dilation)
    return (acc.numpy() * (x_scale * w_scale.astype(np.float64))[None, :, None, None]
            + bias[None, :, None, None])


@pytest.mark.parametrize("shape,kernel,stride,padding,dilation,dtype,zero", [
    ((2, 3, 9, 9), (8, 3, 3), 1, 1, 1, "u8", 120),
    ((3, 5, 8, 7), (20, 3, 2), (2, 1), (1, 0), 1, "s8", -3),
    ((1, 16, 6, 6), (70, 1, 1), 1, 0, 1, "u8", 0),
    ((4, 2, 10, 10), (6, 3, 3), 2, 2, 2, "u8", 255),
])
@pytest.mark.parametrize("threads", [1, 2])
def test_conv2d_against_torch(shape, kernel, stride, padding, dilation, dtype, zero, threads):
    """Padding reads the zero point (real 0), not the byte 0: an edge-heavy u8 zero 255."""
    rng = np.random.default_rng(6)
    lo, hi, t = (0, 256, np.uint8) if dtype == "u8" else (-128, 128, np.int8)
    xq = rng.integers(lo, hi, shape, dtype=t)
    oc, kh, kw = kernel
    wq = rng.integers(-128, 128, (oc, shape[1], kh, kw), dtype=np.int8)
    w_scale = rng.uniform(0.001, 0.01, oc).astype(np.float32)
    bias = rng.normal(size=oc).astype(np.float32)
    y = qconv2d(xq, 0.05, zero, pack_conv_weight(wq, w_scale), bias=bias, stride=stride,
                padding=padding, dilation=dilation, threads=threads)
    ref = _conv_ref(xq, zero, wq, 0.05, w_scale, bias, stride, padding, dilation)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def _tile_runner(mr, nv, lanes, vnni):
    tile = int8_tile.tile_kernel(mr, nv, lanes, vnni)

    @njit
    def run(x, rows, w, kb, z, t):
        tile(x, 0, rows, w, 0, 4 * nv * lanes, kb, z, t)

    return run


@pytest.mark.parametrize("lanes,vnni", [(16, True), (8, True), (16, False), (8, False)])
@pytest.mark.parametrize("mr,nv,rows", [(6, 1, 6), (6, 2, 4), (1, 4, 1), (3, 1, 2)])
def test_micro_kernel_flavours(lanes, vnni, mr, nv, rows):
    """Each flavour of the micro-kernel: t = z + x . w per row (rows past `rows` repeat
    the last), for the AVX-512 and AVX-VNNI intrinsics and the plain IR."""
    if vnni and not int8_tile.VNNI:
        pytest.skip("this CPU has no VNNI")
    cols, kb = nv * lanes, 9
    x, wq = _data(rows, 4 * kb, cols, seed=mr * nv)
    packed = np.ascontiguousarray(wq.reshape(kb, 4, cols).transpose(0, 2, 1)).ravel()
    z = np.arange(cols, dtype=np.int32) - 7
    t = np.zeros(mr * cols, np.int32)
    _tile_runner(mr, nv, lanes, vnni)(x, rows, packed, kb, z, t)
    ref = _sums(x, 0, wq) + z
    ref = ref[np.minimum(np.arange(mr), rows - 1)]
    assert np.array_equal(t.reshape(mr, cols), ref)


@pytest.mark.parametrize("call,message", [
    (lambda w: qgemm(np.zeros((2, 5), np.float32), 1.0, 0, w), "u8/s8 [M, 4]"),
    (lambda w: qgemm(np.zeros((2, 3), np.uint8), 1.0, 0, w), "u8/s8 [M, 4]"),
    (lambda w: qgemm(np.zeros((2, 4), np.uint8), 1.0, 300, w), "zero point"),
    (lambda w: qgemm(np.zeros((2, 4), np.int8), 1.0, 200, w), "zero point"),
    (lambda w: qgemm(np.zeros((2, 4), np.uint8), 1.0, 0, w, bias=np.ones(2)), "bias"),
    (lambda w: qgemm(np.zeros((2, 4), np.uint8), 0.0, 0, w), "x_scale"),
    (lambda w: qgemm(np.zeros((2, 4), np.uint8), 1.0, 0, w, out_scale=1, out_dtype="u4"),
     "dtype"),
    (lambda w: pack_weight(np.zeros((4, 3), np.float32), 1.0), "int8 [K, N]"),
    (lambda w: pack_weight(np.zeros((4, 3), np.int8), np.ones(2)), "weight scale"),
    (lambda w: pack_weight(np.zeros((70000, 1), np.int8), 1.0), "K <= 65536"),
    (lambda w: qconv2d(np.zeros((1, 3, 4, 4), np.uint8), 1.0, 0, w), "pack_conv_weight"),
    (lambda w: qconv2d(np.zeros((1, 2, 2, 2), np.uint8), 1.0, 0,
                       pack_conv_weight(np.zeros((1, 2, 3, 3), np.int8), 1.0)), "does not fit"),
])
def test_bad_input_gives_one_line_errors(call, message):
    w = pack_weight(np.zeros((4, 3), np.int8), 1.0)
    with pytest.raises(CuvilError, match=re.escape(message)) as err:
        call(w)
    assert "\n" not in str(err.value)
