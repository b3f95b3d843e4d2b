"""exp, tanh, erf, sigmoid for f32 kernels, written so that LLVM vectorizes the loops that
use them.

Numba calls the C library for `np.exp`/`np.tanh`/`math.erf` one element at a time (its
LLVM has no vector math library here): 5, 25 and 15 ns per element. These versions are
plain arithmetic, inlined into the kernel's loop, and vectorize. An f32 argument is
computed in f32 (f64 arithmetic runs at half the vector width and its division is slow: a
ViT's exact GELU took longer than the product before it, GPT-2's tanh GELU 1.7 ms after a
2.2 ms product, 0.4 ms in f32). Measured on 1e6 f32 elements, with the error against the
C library in f64:

| function | ms | was (f64 arithmetic) | C library | error |
|---|---|---|---|---|
| exp (Cephes' `expf`) | 0.7 | 1.2 | 5.4 | relative 1.2e-7 on [-20, 20], 3e-7 near 88 |
| tanh (Eigen's rational) | 0.55 | 1.4 | 31 | absolute 2.7e-7 |
| sigmoid, (1 + tanh(x/2)) / 2 | 0.7 | 1.8 | - | absolute 1.4e-7 |
| erf (Eigen's rational) | - | 2.4 | 16 | absolute 4.5e-7 (GELU's 1.4e-6 at 5.6: 1/4 ulp) |

All far inside the 1e-4 that compiled models are held to. An f64 argument gets the C
library's exp, tanh and erf (f64 models match torch to 1e-12, which these approximations
would not).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

from cuvil.runtime.numba_cache import njit

# Inlined into the calling kernel, whose fastmath flags apply (never `ninf`: masks use -inf).
_OPTS = dict(inline="always", error_model="numpy")


def _by_dtype(name: str, doc: str, f32, f64):
    """The function kernels call as `name(x)`: `f32(x)` for an f32 argument, else `f64(x)`
    (chosen when the call is typed, and inlined)."""

    def stub(x):
        raise NotImplementedError(f"{name} runs inside compiled code")

    stub.__name__, stub.__qualname__, stub.__doc__ = name, name, doc

    @overload(stub, inline="always")
    def _typed(x):
        impl = f32 if x == types.float32 else f64
        return lambda x: impl(x)

    return stub


@intrinsic
def _f32_from_bits(typingctx, i):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@intrinsic
def _bits_of_f32(typingctx, f):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


@njit(**_OPTS)
def _exp32(x):
    """Cephes' `expf`: x = n ln2 + r, |r| <= ln2 / 2, exp(r) by a degree-6 polynomial,
    then n added to its exponent bits. 0 below -87.34 (f32's smallest normal), inf above
    88.72, NaN kept."""
    v = min(max(x, np.float32(-87.33654)), np.float32(88.72283))
    n = np.floor(v * np.float32(1.44269504088896341) + np.float32(0.5))
    r = v - n * np.float32(0.693359375)  # ln 2 in two parts, the first exact in f32
    r = r - n * np.float32(-2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    y = p * r * r + r + np.float32(1.0)
    out = _f32_from_bits(_bits_of_f32(y) + (np.int32(n) << np.int32(23)))
    out = out if x > np.float32(-87.33654) else np.float32(0.0)
    out = out if x < np.float32(88.72283) else np.float32(np.inf)
    return out if x == x else x


@njit(**_OPTS)
def _exp64(x):
    return np.exp(x)


@njit(**_OPTS)
def vmaximum(a, b):
    """torch.maximum of two numbers: NaN if either is (one unordered compare and a select,
    as cheap as Python's `max`, which keeps its first operand when the second is NaN)."""
    return a if a > b or a != a else b


@njit(**_OPTS)
def vminimum(a, b):
    """torch.minimum of two numbers: NaN if either is."""
    return a if a < b or a != a else b


@njit(**_OPTS)
def vmax(row):
    """The largest element of 1-d `row` (at least one element), in eight running maxima: one
    is a chain of dependent compares LLVM does not vectorize (1 ns per element); with
    eight, 0.25 ns. A NaN may be skipped (softmax needs none: `exp(x - m)` is NaN at it);
    `vamax` is torch's amax."""
    n = row.shape[0]
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = row[0]
    n8 = n - n % 8
    for j in range(0, n8, 8):
        m0, m1, m2, m3 = max(m0, row[j]), max(m1, row[j + 1]), max(m2, row[j + 2]), \
            max(m3, row[j + 3])
        m4, m5, m6, m7 = max(m4, row[j + 4]), max(m5, row[j + 5]), max(m6, row[j + 6]), \
            max(m7, row[j + 7])
    for j in range(n8, n):
        m0 = max(m0, row[j])
    return max(max(max(m0, m1), max(m2, m3)), max(max(m4, m5), max(m6, m7)))


@njit(**_OPTS)
def vmasked(row, m):
    """Whether 1-d `row`, whose `vmax` is `m`, is -inf throughout: a fully masked attention
    row, which torch's math backend weighs 0 (`_safe_softmax`) where softmax is NaN. A
    NaN `vmax` skipped leaves `m` -inf too; that row is not masked (its softmax is NaN)."""
    n, j = row.shape[0], 0
    while m == -np.inf and j < n and row[j] == -np.inf:
        j += 1
    return j == n


@njit(**_OPTS)
def vamax(row):
    """torch.amax of 1-d `row`: `vmax`, or NaN if the row holds one. A NaN-keeping compare
    in the eight maxima stops LLVM vectorizing them (3x slower); instead a second pass
    sums `x * 0` (NaN at a NaN or an infinity; vectorized, the row in cache) and only a
    NaN sum looks for a NaN."""
    m = vmax(row)
    z = row[0] - row[0]
    for j in range(row.shape[0]):
        z += row[j] * row.dtype.type(0)
    if z == z:
        return m
    for j in range(row.shape[0]):
        if row[j] != row[j]:
            return row[j]
    return m


@njit(**_OPTS)
def vrsqrt(x):
    """1 / sqrt(x) as torch.rsqrt: inf at 0 (-inf at -0), 0 at inf, NaN below 0. A
    kernel's `arcp`/`afn` flags let LLVM compute `1 / sqrt` by the hardware's estimate and
    a Newton step, NaN at 0 and inf and wrong on subnormals; those are handled here and
    the estimate kept for the rest (1e6 f32: 0.9 ms, against 1.5 for a division and 0.6
    for the bare estimate)."""
    small = x < np.float32(5.421010862427522e-20)  # 2 ** -64: subnormals scaled into range
    r = np.float32(1) / np.sqrt(x * (np.float32(1.8446744073709552e19) if small else
                                     np.float32(1)))
    r = r * (np.float32(4294967296.0) if small else np.float32(1))
    r = r if x != np.float32(0) else math.copysign(np.float32(np.inf), x)
    return r if x != np.float32(np.inf) else np.float32(0)


@njit(**_OPTS)
def _tanh32(x):
    """A rational approximation in f32 (Eigen's `generic_fast_tanh_float`): x P(x^2) /
    Q(x^2) on [-8, 8], where it rounds to +-1 in f32."""
    v = min(max(x, np.float32(-7.99881172180175781)), np.float32(7.99881172180175781))
    v2 = v * v
    p = v2 * np.float32(-2.76076847742355e-16) + np.float32(2.00018790482477e-13)
    p = p * v2 + np.float32(-8.60467152213735e-11)
    p = p * v2 + np.float32(5.12229709037114e-08)
    p = p * v2 + np.float32(1.48572235717979e-05)
    p = p * v2 + np.float32(6.37261928875436e-04)
    p = p * v2 + np.float32(4.89352455891786e-03)
    q = v2 * np.float32(1.19825839466702e-06) + np.float32(1.18534705686654e-04)
    q = q * v2 + np.float32(2.26843463243900e-03)
    q = q * v2 + np.float32(4.89352518554385e-03)
    return v * p / q


@njit(**_OPTS)
def _tanh64(x):
    return np.tanh(x)


@njit(**_OPTS)
def _sigmoid32(x):
    return np.float32(0.5) + np.float32(0.5) * _tanh32(np.float32(0.5) * x)


@njit(**_OPTS)
def _sigmoid64(x):
    return 1.0 / (1.0 + np.exp(-x))


@njit(**_OPTS)
def _erf32(x):
    """A rational approximation in f32 (Eigen's `generic_fast_erf_float`): x P(x^2) /
    Q(x^2) on [-4, 4], where f32's erf reaches +-1."""
    v = min(max(x, np.float32(-4.0)), np.float32(4.0))
    v2 = v * v
    p = v2 * np.float32(-2.72614225801306e-10) + np.float32(2.77068142495902e-08)
    p = p * v2 + np.float32(-2.10102402082508e-06)
    p = p * v2 + np.float32(-5.69250639462346e-05)
    p = p * v2 + np.float32(-7.34990630326855e-04)
    p = p * v2 + np.float32(-2.95459980854025e-03)
    p = p * v2 + np.float32(-1.60960333262415e-02)
    q = v2 * np.float32(-1.45660718464996e-05) + np.float32(-2.13374055278905e-04)
    q = q * v2 + np.float32(-1.68282697438203e-03)
    q = q * v2 + np.float32(-7.37332916720468e-03)
    q = q * v2 + np.float32(-1.42647390514189e-02)
    return v * p / q


@njit(**_OPTS)
def _erf64(x):
    return math.erf(x)


vexp = _by_dtype("vexp", "exp(x): in f32 arithmetic for an f32 argument, else the C library's.",
                 _exp32, _exp64)
vtanh = _by_dtype("vtanh", "tanh(x): in f32 arithmetic for an f32 argument, else the C library's.",
                  _tanh32, _tanh64)
verf = _by_dtype("verf", "erf(x): in f32 arithmetic for an f32 argument, else the C library's.",
                 _erf32, _erf64)
vsigmoid = _by_dtype("vsigmoid", "1 / (1 + exp(-x)); for an f32, (1 + tanh(x / 2)) / 2 in f32.",
                     _sigmoid32, _sigmoid64)
