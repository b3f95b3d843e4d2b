"""Whole-array copies for the movement template's plain-Python kernels (`templates.movement`).

numpy's strided copy runs on one thread. A large copy goes through torch's `copy_` on the
same memory instead, which splits it over torch's threads and vectorises the contiguous
runs: on the encoder layer's transposes (2-6 MB) it takes 0.4-0.65 of numpy's time on this
machine's two cores. Small copies, negative strides (a flip), read-only sources and dtypes
torch does not wrap stay numpy's.
"""

from __future__ import annotations

import numpy as np
import torch

LARGE = 1 << 16  # elements: below this, wrapping both arrays costs more than it saves
_WRAPPED = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.float16, np.int64,
                                           np.int32, np.int16, np.int8, np.uint8, np.bool_))


def copy_into(out: np.ndarray, src: np.ndarray) -> None:
    """`np.copyto(out, src)` (src broadcasts to out's shape), on torch's threads if large."""
    if out.size >= LARGE and src.dtype == out.dtype and src.dtype in _WRAPPED and \
            src.flags.writeable and min((*src.strides, *out.strides), default=0) >= 0:
        torch.from_numpy(out).copy_(torch.from_numpy(src))
    else:
        np.copyto(out, src)
