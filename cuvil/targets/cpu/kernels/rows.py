"""Layer norm over the last dims as a call compiled once per installation: a `rows` group
that is one layer norm of contiguous rows *is* `layer_norm_rows`, so lowering generates
and Numba compiles nothing for it (the transformer's generated row kernel took ~1.3 s to
compile). Other row kernels (softmax, reductions, strided rows) are generated
(`templates.reduction`).

Rows are split between threads when there are at least two and `mode[0]` elements (the
threshold lowering decides, as for a generated row kernel); each row is three passes in
cache: the mean, the variance, the normalized and scaled output.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from cuvil.runtime.numba_cache import njit

_OPTS = dict(nogil=True, error_model="numpy",
             fastmath={"nsz", "arcp", "contract", "afn", "reassoc"})  # no nnan: NaN as torch


@njit(inline="always", **_OPTS)
def _row(x, w, b, eps, o):
    n = x.dtype.type(x.shape[0])
    s = x.dtype.type(0)
    for j in range(x.shape[0]):
        s += x[j]
    mean = s / n
    v = x.dtype.type(0)
    for j in range(x.shape[0]):
        d = x[j] - mean
        v += d * d
    inv = x.dtype.type(1) / np.sqrt(v / n + eps)
    for j in range(x.shape[0]):
        o[j] = (x[j] - mean) * inv * w[j] + b[j]


@njit(**_OPTS)
def _rows(x, w, b, eps, o):
    for r in range(x.shape[0]):
        _row(x[r], w, b, eps, o[r])


@njit(parallel=True, link=False, **_OPTS)
def _rows_split(x, w, b, eps, o):
    for r in prange(x.shape[0]):
        _row(x[r], w, b, eps, o[r])


@njit(nogil=True)
def layer_norm_rows(x, w, b, eps, mode, parts, out):
    """out = layer_norm(x) over its last `w.ndim` dims, weight `w`, bias `b`; eps[0]."""
    rl = w.size
    nr = x.size // rl if rl else 0
    xr, o = x.reshape((nr, rl)), out.reshape((nr, rl))
    wf, bf, e = w.reshape(rl), b.reshape(rl), x.dtype.type(eps[0])
    if parts > 1 and nr > 1 and x.size >= mode[0]:
        _rows_split(xr, wf, bf, e, o)
    else:
        _rows(xr, wf, bf, e, o)
