"""The C heap of a training process: memory a step frees is kept for the next step.

A training step through the backend allocates its activations in the forward graph and
frees them when the backward graph returns (AOTAutograd's saved tensors live until then;
eager autograd frees each as its node runs). So the heap's top grows by the step's peak and
falls back at its end, and glibc's malloc returns that top to the system once it exceeds
its trim threshold (at most 64 MiB as glibc adjusts it): the next step touches the same
amount of fresh pages again. ResNet-18 at batch 32 moved the top by ~80 MiB a step, 8,000
to 16,000 page faults (eager's own step: ~700-2,000), 20-25 ms of system time a step on
the AMD EPYC, one thread, at load 5.

`keep_freed_memory` sets the thresholds once, for the process, when the backend compiles
its first backward graph: blocks under 32 MiB come from the heap (what glibc's own
adjustment reaches; larger ones are mapped on their own, as before) and up to 1 GiB freed
at the top stays with the process. A training process reaches the same peak each step, so
its peak memory is what it was; between steps it holds what it freed. Nothing is changed
when the program set any of glibc's `MALLOC_*` tunables itself (environment variables or
`GLIBC_TUNABLES`), or where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import os
import threading

M_TRIM_THRESHOLD = -1  # glibc's <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # the largest glibc's own adjustment reaches on 64-bit
TRIM_THRESHOLD = 1 << 30
_USER_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_",
                  "MALLOC_MMAP_MAX_", "MALLOC_ARENA_MAX")

_lock = threading.Lock()
_done: list[bool] = []  # the outcome, once it was decided


def user_chose() -> bool:
    """Whether the environment sets glibc's malloc tunables."""
    return any(name in os.environ for name in _USER_SETTINGS) or \
        "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", "")


def _glibc() -> ctypes.CDLL | None:
    """The process's C library, if it is glibc."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 (glibc only)
        return libc if hasattr(libc, "mallopt") else None
    except (OSError, AttributeError):
        return None


def keep_freed_memory() -> bool:
    """Set the heap's thresholds (see the module's docstring), once per process; whether
    they are Cuvil's."""
    with _lock:
        if not _done:
            libc = None if user_chose() else _glibc()
            _done.append(libc is not None
                         and libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                         and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
        return _done[0]
