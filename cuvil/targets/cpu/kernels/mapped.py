"""An add, subtract or multiply of two operands read through axis maps, each scaled by a
constant, as one call compiled once per installation: an elementwise group that is one such
op on f32 arrays whose operands follow the output's dims in any order or broadcast
(`x + y.transpose(1, 2)`, a bias, a position table, `2.5 * x + y`) *is* `binary_mapped`, so
lowering generates and Numba compiles nothing for it (the generated loop took 1.1-2 s to
compile: the transformer's residual add of its batch-first attention output, ViT's
patch-plus-position add, Mixer's token-mixing residual, axpy).

`amap[p]` (`bmap[p]`) is the axis of `a` (`b`) that output dim p follows, -1 where the
operand is broadcast along it; output dims are counted after padding the output's shape
with leading 1s to rank 4. Rows of the last dim are split between threads from
`mode[1]` output elements (each row's columns, when there are fewer rows than threads);
`mode[0]` is the op (0 add, 1 subtract, 2 multiply); `scale` holds the two operands'
factors (1 for none): out = (scale[0]*a) op (scale[1]*b).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from cuvil.runtime.numba_cache import njit

RANK = 4
_FAST = {"nsz", "arcp", "contract", "afn", "reassoc"}


@njit(nogil=True, inline="always")
def _strides(x, amap):
    """Element strides of `x` along each of the (padded) output's 4 dims."""
    own = np.empty(max(x.ndim, 1), np.intp)
    step = 1
    for k in range(x.ndim - 1, -1, -1):
        own[k] = step
        step *= x.shape[k]
    out = np.zeros(RANK, np.intp)
    for p in range(RANK):
        if amap[p] >= 0:
            out[p] = own[amap[p]]
    return out


@njit(nogil=True, inline="always")
def _shape(out):
    shape = np.ones(RANK, np.intp)
    for k in range(out.ndim):
        shape[RANK - out.ndim + k] = out.shape[k]
    return shape


@njit(nogil=True, inline="always")
def _apply(af, pa, sa, bf, pb, sb, row, op, ca, cb):
    """row[j] = ca*af[pa + j*sa] (op) cb*bf[pb + j*sb]: a loop per op; unsigned indices, so
    that Numba adds no negative-index fixup (which kept such loops scalar and twice as
    slow)."""
    if op == 0:
        for j in range(row.shape[0]):
            row[j] = ca * af[np.uintp(pa + j * sa)] + cb * bf[np.uintp(pb + j * sb)]
    elif op == 1:
        for j in range(row.shape[0]):
            row[j] = ca * af[np.uintp(pa + j * sa)] - cb * bf[np.uintp(pb + j * sb)]
    else:
        for j in range(row.shape[0]):
            row[j] = ca * af[np.uintp(pa + j * sa)] * (cb * bf[np.uintp(pb + j * sb)])


@njit(nogil=True, fastmath=_FAST, error_model="numpy")
def _rows(af, sa, bf, sb, o, shape, op, r0, r1, j0, j1):
    """Columns j0..j1 of rows r0..r1 of o [rows, n]: o[r, j] = ca*a (code) cb*b at row r,
    column j, for op = (code, ca, cb). A stride of 1 is passed as the literal 1, so that
    contiguous rows are vector loads."""
    code, ca, cb = op
    for r in range(r0, r1):
        i2, i1, i0 = r % shape[2], (r // shape[2]) % shape[1], r // (shape[2] * shape[1])
        pa = i0 * sa[0] + i1 * sa[1] + i2 * sa[2] + j0 * sa[3]
        pb = i0 * sb[0] + i1 * sb[1] + i2 * sb[2] + j0 * sb[3]
        row = o[r, j0:j1]
        if sa[3] == 1 and sb[3] == 1:
            _apply(af, pa, 1, bf, pb, 1, row, code, ca, cb)
        elif sb[3] == 1:
            _apply(af, pa, sa[3], bf, pb, 1, row, code, ca, cb)
        elif sa[3] == 1:
            _apply(af, pa, 1, bf, pb, sb[3], row, code, ca, cb)
        else:
            _apply(af, pa, sa[3], bf, pb, sb[3], row, code, ca, cb)


@njit(nogil=True, parallel=True, link=False)
def _split(af, sa, bf, sb, o, shape, op, parts):
    """Rows split between threads; with fewer rows than threads, each row's columns."""
    rows, n = o.shape
    by_rows = rows >= parts
    step = (rows + parts - 1) // parts if by_rows else (n + parts - 1) // parts
    for t in prange(parts):
        if by_rows:
            _rows(af, sa, bf, sb, o, shape, op, min(rows, t * step), min(rows, (t + 1) * step),
                  0, n)
        else:
            _rows(af, sa, bf, sb, o, shape, op, 0, rows, min(n, t * step), min(n, (t + 1) * step))


@njit(nogil=True)
def binary_mapped(a, amap, b, bmap, mode, scale, parts, out):
    """out = scale[0]*a (mode[0]) scale[1]*b, each operand read through its axis map
    (module docstring)."""
    shape, op = _shape(out), (mode[0], scale[0], scale[1])
    sa, sb = _strides(a, amap), _strides(b, bmap)
    rows = shape[0] * shape[1] * shape[2]
    o = out.reshape((rows, shape[3]))
    af, bf = a.reshape(a.size), b.reshape(b.size)
    if parts > 1 and out.size >= mode[1]:
        _split(af, sa, bf, sb, o, shape, op, parts)
    else:
        _rows(af, sa, bf, sb, o, shape, op, 0, rows, 0, shape[3])
