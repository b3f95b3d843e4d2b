"""Device functions generated CUDA kernels call: the GPU spellings of the CPU's vectorizable
math (`cuvil.targets.cpu.kernels.vmath`), so one element expression serves both targets."""

from __future__ import annotations

import math

from numba import cuda


@cuda.jit(device=True)
def vexp(x):
    return math.exp(x)


@cuda.jit(device=True)
def vtanh(x):
    return math.tanh(x)


@cuda.jit(device=True)
def verf(x):
    return math.erf(x)


@cuda.jit(device=True)
def vsigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


@cuda.jit(device=True)
def vmax(row):
    m = row[0]
    for j in range(1, row.shape[0]):
        m = max(m, row[j])
    return m


@cuda.jit(device=True)
def vmaximum(a, b):
    return a if a > b or a != a else b


@cuda.jit(device=True)
def vamax(row):
    m = row[0]
    for j in range(1, row.shape[0]):
        m = vmaximum(row[j], m)
    return m


@cuda.jit(device=True)
def vminimum(a, b):
    return a if a < b or a != a else b


@cuda.jit(device=True)
def vrsqrt(x):
    return 1.0 / math.sqrt(x) if x != 0 else math.copysign(math.inf, x)
