"""Quantized GEMM and convolution from Python: pack int8 weights (once, at compile time),
check the inputs, allocate the outputs and call the int8 kernels of `kernels.int8`.

    w = pack_weight(wq, w_scale)                       # wq int8 [K, N], scale per column
    xq = quantize(x, x_scale, x_zero, "u8")            # f32 [M, K] -> u8
    y = qgemm(xq, x_scale, x_zero, w, bias=b)          # f32 [M, N]
    q = qgemm(xq, x_scale, x_zero, w, out_scale=s, out_zero=z, out_dtype="u8")  # u8 [M, N]
    wc = pack_conv_weight(wq4, w_scale)                # int8 [OC, C, KH, KW]
    y = qconv2d(xq4, x_scale, x_zero, wc, bias=b, stride=1, padding=1)         # NCHW

    y[m, n] = x_scale * w_scale[n] * sum_k (xq[m, k] - x_zero) * wq[k, n] + bias[n]

Activations are u8 (any zero point) or s8 (symmetric or not); weights s8 with zero point 0.
Generated code calls `int8.qgemm_into` / `int8.qconv2d_into` itself, with the weight tuple
`QWeight.args(bias)` and `epilogue(...)` made here at compile time; when the input's zero
point is static too, `int8.prepare(args, x_zero)` once and
`int8.qgemm_prepared` per call (two small allocations less).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from cuvil.errors import CuvilError
from cuvil.targets.cpu.kernels.int8 import (
    MAX_K,
    NARROW,
    PANEL,
    qconv2d_into,
    qgemm_into,
    quantize_into,
)

LEVELS = {"u8": (0, 255, np.uint8), "s8": (-128, 127, np.int8)}


@dataclass(frozen=True)
class QWeight:
    """An int8 weight packed for `qgemm_into`: `data` (panels), `colsum` int32 [N],
    `scale` f32 [N] (per output channel), K and N; `kernel` (KH, KW, C) for convolutions."""

    data: np.ndarray
    colsum: np.ndarray
    scale: np.ndarray
    k: int
    n: int
    kernel: tuple[int, ...] = ()

    def args(self, bias=None) -> tuple:
        """The weight tuple the kernels take, with the bias (zeros when None)."""
        b = np.zeros(self.n, np.float32) if bias is None else _vector(bias, self.n, "bias")
        return (self.data, self.colsum, self.scale, b, (self.k + 3) // 4, self.n)


def pack_weight(wq, scale) -> QWeight:
    """Pack wq int8 [K, N] with its scale (one, or one per column): panels of 64 columns
    (the last one 16, 32 or 48), each [K/4, columns, 4] bytes, zeros padding K to a
    multiple of 4 and N to one of 16."""
    wq = np.asarray(wq)
    if wq.dtype != np.int8 or wq.ndim != 2:
        raise CuvilError(f"pack_weight expects an int8 [K, N] weight, got {wq.dtype} {wq.shape}")
    k, n = wq.shape
    if k > MAX_K:
        raise CuvilError(f"int8 GEMM supports K <= {MAX_K} (int32 sums), got K={k}")
    kb, full = (k + 3) // 4, n // PANEL
    npad = full * PANEL + (n - full * PANEL + NARROW - 1) // NARROW * NARROW
    padded = np.zeros((4 * kb, npad), np.int8)
    padded[:k, :n] = wq
    panels = [padded[:, c:c + PANEL] for c in range(0, npad, PANEL)]  # the last may be narrower
    data = np.concatenate([p.reshape(kb, 4, p.shape[1]).transpose(0, 2, 1).ravel() for p in panels]
                          or [np.zeros(0, np.int8)])
    colsum = wq.astype(np.int32).sum(axis=0, dtype=np.int32)
    return QWeight(data, colsum, _vector(scale, n, "weight scale"), k, n)


def pack_conv_weight(wq, scale) -> QWeight:
    """Pack a conv2d weight wq int8 [OC, C, KH, KW] (scale per OC) for `qconv2d`; K runs
    over (kh, kw, c), the order of the im2col columns."""
    wq = np.asarray(wq)
    if wq.dtype != np.int8 or wq.ndim != 4:
        raise CuvilError(f"pack_conv_weight expects int8 [OC, C, KH, KW], got {wq.dtype} "
                         f"{wq.shape}")
    oc, c, kh, kw = wq.shape
    packed = pack_weight(np.ascontiguousarray(wq.transpose(2, 3, 1, 0).reshape(-1, oc)), scale)
    return QWeight(packed.data, packed.colsum, packed.scale, packed.k, oc, (kh, kw, c))


def epilogue(x_scale: float, relu: bool = False, out_scale: float | None = None,
             out_zero: int = 0, out_dtype: str = "u8") -> tuple:
    """The kernels' epilogue tuple: dequantize (f32 out), or requantize when `out_scale`
    is given (out of `out_dtype`, zero point `out_zero`)."""
    qmin, qmax, _ = _levels(out_dtype)
    if not x_scale > 0:
        raise CuvilError(f"x_scale must be > 0, got {x_scale}")
    if out_scale is None:
        return (float(x_scale), bool(relu), False, 1.0, 0, qmin, qmax)
    if not out_scale > 0:
        raise CuvilError(f"out_scale must be > 0, got {out_scale}")
    return (float(x_scale), bool(relu), True, float(out_scale), _zero(out_zero, out_dtype),
            qmin, qmax)


def quantize(x, scale: float, zero: int = 0, dtype: str = "u8") -> np.ndarray:
    """clamp(rint(x / scale) + zero) as u8 or s8, for a 2-d float array."""
    qmin, qmax, np_type = _levels(dtype)
    x = np.asarray(x, np.float32)
    if x.ndim != 2 or not scale > 0:
        raise CuvilError(f"quantize expects a 2-d array and scale > 0, got {x.shape}, {scale}")
    out = np.empty(x.shape, np_type)
    quantize_into(x, 1.0 / scale, _zero(zero, dtype), qmin, qmax, out)
    return out


def qgemm(xq, x_scale: float, x_zero: int, w: QWeight, bias=None, relu: bool = False,
          out_scale: float | None = None, out_zero: int = 0, out_dtype: str = "u8",
          threads: int | None = None) -> np.ndarray:
    """xq (u8 or s8) [M, K] times the packed weight: f32 [M, N], or requantized."""
    xq = np.asarray(xq)
    if xq.ndim != 2 or xq.dtype not in (np.uint8, np.int8) or xq.shape[1] != w.k:
        raise CuvilError(f"qgemm expects u8/s8 [M, {w.k}] activations, got {xq.dtype} "
                         f"{xq.shape}")
    x, zx = _u8_rows(xq, x_zero)
    ep = epilogue(x_scale, relu, out_scale, out_zero, out_dtype)
    out = np.empty((xq.shape[0], w.n), _out_type(out_scale, out_dtype))
    qgemm_into(x, zx, w.args(bias), ep, out, _threads(threads))
    return out


def qconv2d(xq, x_scale: float, x_zero: int, w: QWeight, bias=None, stride=1, padding=0,
            dilation=1, relu: bool = False, out_scale: float | None = None, out_zero: int = 0,
            out_dtype: str = "u8", threads: int | None = None) -> np.ndarray:
    """conv2d of xq (u8 or s8) [N, C, H, W] with a `pack_conv_weight` weight, NCHW out."""
    xq = np.ascontiguousarray(xq)
    if not w.kernel or xq.ndim != 4 or xq.dtype not in (np.uint8, np.int8) or \
            xq.shape[1] != w.kernel[2]:
        raise CuvilError(f"qconv2d expects u8/s8 [N, C, H, W] activations with C = "
                         f"{w.kernel[2:]} and a pack_conv_weight weight, got {xq.dtype} "
                         f"{xq.shape}")
    kh, kw, c = w.kernel
    (sh, sw), (ph, pw), (dh, dw) = (_pair(v) for v in (stride, padding, dilation))
    nb, _, h, wd = xq.shape
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1 or min(sh, sw, dh, dw) < 1 or min(ph, pw) < 0:
        raise CuvilError(f"qconv2d: a {kh}x{kw} kernel with stride {stride}, padding "
                         f"{padding}, dilation {dilation} does not fit a {h}x{wd} input")
    shift = 128 if xq.dtype == np.int8 else 0
    zx = _zero(x_zero, "s8" if shift else "u8") + shift
    parts = _threads(threads)
    out_type = _out_type(out_scale, out_dtype)
    out = np.empty((nb, w.n, oh, ow), out_type)
    scratch = max(1, min(parts, nb))
    xt = np.empty((scratch, h, wd, c), np.uint8)
    cols = np.empty((scratch, oh * ow, 4 * ((w.k + 3) // 4)), np.uint8)
    tmp = np.empty((scratch, oh * ow, w.n), out_type)
    ep = epilogue(x_scale, relu, out_scale, out_zero, out_dtype)
    qconv2d_into(xq, shift, zx, w.args(bias), ep, (kh, kw, sh, sw, ph, pw, dh, dw), out, xt,
                 cols, tmp, parts)
    return out


def _u8_rows(xq: np.ndarray, x_zero) -> tuple[np.ndarray, int]:
    """u8 rows with K padded to a multiple of 4 (copied only when needed), zero point;
    s8 moves to u8 by adding 128 (to values and zero point)."""
    k = xq.shape[1]
    if xq.dtype == np.int8:
        zx = _zero(x_zero, "s8") + 128
        xq = xq.view(np.uint8) ^ np.uint8(0x80)
    else:
        zx = _zero(x_zero, "u8")
    if k % 4 == 0 and xq.strides[1] == 1:
        return xq, zx
    x = np.zeros((xq.shape[0], 4 * ((k + 3) // 4)), np.uint8)
    x[:, :k] = xq
    return x, zx


def _threads(threads: int | None) -> int:
    """Threads to split over (`threads`, else torch's setting), Numba's pool set to match;
    Cuvil's threading layer is launched first (the kernels link a parallel helper)."""
    from cuvil.runtime.threads import choose_layer, thread_count

    choose_layer()
    parts = thread_count(threads)
    numba.set_num_threads(parts)
    return parts


def _out_type(out_scale, out_dtype: str) -> type:
    return np.float32 if out_scale is None else _levels(out_dtype)[2]


def _levels(dtype: str) -> tuple[int, int, type]:
    if dtype not in LEVELS:
        raise CuvilError(f"int8 dtype must be one of {sorted(LEVELS)}, got {dtype!r}")
    return LEVELS[dtype]


def _zero(zero, dtype: str) -> int:
    qmin, qmax, _ = _levels(dtype)
    if int(zero) != zero or not qmin <= zero <= qmax:
        raise CuvilError(f"a {dtype} zero point must be an integer in [{qmin}, {qmax}], got {zero}")
    return int(zero)


def _vector(v, n: int, what: str) -> np.ndarray:
    a = np.asarray(v, np.float32)
    a = np.full(n, a, np.float32) if a.ndim == 0 else np.ascontiguousarray(a)
    if a.shape != (n,):
        raise CuvilError(f"{what} must be a scalar or have shape ({n},), got {a.shape}")
    return a


def _pair(v) -> tuple[int, int]:
    return (int(v), int(v)) if np.ndim(v) == 0 else (int(v[0]), int(v[1]))
