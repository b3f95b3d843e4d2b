"""Arrays whose data starts on a cache line (64 bytes).

numpy aligns its large allocations to 16 bytes only (glibc's mmap'd chunks), so a packed
weight panel's 64-byte vector loads each touched two cache lines: aligning the zoo MLP's
constants took its kernel from 16.9 to 15.8 us a call (weights streamed from L3). Every
constant a compiled graph holds is made so: at lowering, and when the program cache
reads one back.
"""

from __future__ import annotations

import numpy as np

LINE = 64  # bytes: a cache line, and an AVX-512 vector


def empty(shape, dtype) -> np.ndarray:
    """`np.empty(shape, dtype)`, its data aligned to a cache line."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + LINE, np.uint8)
    start = -raw.ctypes.data % LINE
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def contiguous(array: np.ndarray) -> np.ndarray:
    """`array` in C order (0-d kept 0-d), its data aligned to a cache line: itself when it
    is both already, else a copy."""
    a = np.ascontiguousarray(array).reshape(np.shape(array))
    if a.size == 0 or a.ctypes.data % LINE == 0:
        return a
    out = empty(a.shape, a.dtype)
    out[...] = a
    return out
