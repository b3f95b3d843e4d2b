"""Python's cyclic garbage collector paused while `cuvil.compile` runs, resumed for the work
that makes garbage at scale.

A warm compile imports sympy, Numba and Cuvil's lowering, traces the model and loads
kernels: it allocates ~100,000 objects that all live on (modules, classes, dispatchers)
and makes almost no cyclic garbage. Each allocation burst triggers collections, and with
torch, sympy and Numba loaded a full one scans the whole heap: two full collections and
~200 young ones took 0.22-0.28 s of a 1.0-1.3 s warm compile, and collected ~40 objects.
Paused, the compile does none of them; once the collector is back, the next full
collection scans the heap once (about 0.1 s, at some later point of the program).

The work that does make cyclic garbage (torch.export, the optimizer, Numba compiling a
kernel) runs inside `resumed()`, with the collector as the program had it. Nesting and
threads are counted: the collector is off while any compile is paused and not resumed,
and is left as the program had it (`gc.disable()` by the program is respected) once the
last one ends.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_paused = 0  # compiles running paused (not inside `resumed`)
_enabled_before = True  # the program's setting, when the first one paused


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The collector off for the block (unless a program that disabled it keeps it off)."""
    _enter()
    try:
        yield
    finally:
        _leave()


@contextlib.contextmanager
def resumed() -> Iterator[None]:
    """Inside `paused()`: the collector as the program had it, for the block (outside,
    nothing changes)."""
    with _lock:
        active = _paused > 0
    if not active:
        yield
        return
    _leave()
    try:
        yield
    finally:
        _enter()


def _enter() -> None:
    global _paused, _enabled_before
    with _lock:
        if _paused == 0:
            _enabled_before = gc.isenabled()
            gc.disable()
        _paused += 1


def _leave() -> None:
    global _paused
    with _lock:
        _paused -= 1
        if _paused == 0 and _enabled_before:
            gc.enable()
