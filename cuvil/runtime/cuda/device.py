"""Device functions generated CUDA kernels call: the GPU spellings of the CPU's vectorizable
math (`cuvil.runtime.vmath`), so one element expression serves both targets."""

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
