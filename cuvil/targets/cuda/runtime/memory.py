"""Device memory: planned buffers as `numba.cuda` device arrays, copies across the link."""

from __future__ import annotations

import numpy as np
from numba import cuda


def is_device(array) -> bool:
    return hasattr(array, "copy_to_host")


def device_empty(n: int, dtype) -> object:
    """A flat device array of `n` elements."""
    return cuda.device_array(max(int(n), 1), dtype)[:int(n)]


def transfer(src, dst) -> None:
    """Copy `src` into `dst`, each a host or a device array of the same shape (an empty one:
    nothing to copy)."""
    if dst.size == 0:
        return
    if is_device(dst):
        dst.copy_to_device(src)
    elif is_device(src):
        src.copy_to_host(dst)
    else:
        np.copyto(dst, src)


def to_host(array) -> np.ndarray:
    return array.copy_to_host() if is_device(array) else array


def upload(array: np.ndarray) -> object:
    """A device copy of a host array (a constant: copied once per compiled graph), of its
    shape (`np.ascontiguousarray` makes a 0-d array 1-d)."""
    return cuda.to_device(np.ascontiguousarray(array).reshape(np.shape(array)))
