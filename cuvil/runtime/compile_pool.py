"""Cold kernels compiled side by side: worker processes fill Numba's on-disk cache.

Numba compiles one function at a time on one core, and on a cold cache compiling the
kernels is most of a compile (a ResNet block: 7.8 s of 11 s, three parallel kernels).
Every kernel lives in a module file of its own with `cache=True` (`module_cache`), so a
kernel compiled by another process lands in Numba's cache, where this process then loads
it in milliseconds. `compile_cold` splits the kernels that are in neither this process
nor that cache into one share per core, hands all shares but one to the worker processes
of loky's reusable executor, compiles the last share itself meanwhile, and waits for the
workers. The workers outlive a compile (`IDLE_S`): the next compile's workers have Numba,
its runtime and the shared drivers they compiled loaded already.

A kernel that calls a shared driver not yet compiled (`numba_cache`: the first use of
`conv2d_nchw_image` since Cuvil was installed or changed) is compiled here first, alone:
every worker would otherwise compile the same driver at once. Nothing depends on a
worker succeeding: the caller then compiles every kernel as before, loading what the
workers left in the cache and compiling anything still missing (with Numba's errors).
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import Future, wait
from dataclasses import dataclass

from loky import get_reusable_executor
from numba.core import types as nbtypes
from numba.core.registry import CPUDispatcher

from cuvil.errors import CuvilError
from cuvil.runtime import nrt_cache
from cuvil.runtime.lazy_link import install

WORKER_TIMEOUT_S = 600
IDLE_S = 300  # a worker left idle this long exits (and takes its warm Numba with it)


@dataclass(frozen=True)
class Job:
    """A kernel to compile: its module file, function name and argument types."""

    path: str
    name: str
    signatures: tuple[tuple, ...]  # per signature, per argument: (dtype, ndim) or ("int64",)
    weight: float = 1.0  # expected compile time, relative (a parallel kernel: 4)
    helpers: tuple[tuple[str, str], ...] = ()  # the shared drivers it calls: (name, module)


def encode(sig: tuple) -> tuple:
    return tuple(("int64",) if t == nbtypes.int64 else (str(t.dtype), t.ndim) for t in sig)


def decode(sig) -> tuple:
    return tuple(nbtypes.int64 if len(a) == 1 else
                 nbtypes.Array(getattr(nbtypes, a[0]), a[1], "C") for a in sig)


def is_cold(fn, sigs) -> bool:
    """Whether compiling `fn` for `sigs` would run Numba's compiler (not in this process,
    not in the on-disk cache). What the on-disk cache holds is loaded into `fn` on the
    way, by Numba's own `compile` stopped short of its compiler (`_CacheOnly`), so the
    caller's `compile` finds it loaded: a warm compile loads each kernel once. A kernel
    with no on-disk cache (its target's decorator has no `cache=True`: a `NullCache`) is
    never sent to a worker, nothing would carry its code back, and nothing is loaded."""
    if not isinstance(fn, CPUDispatcher) or not hasattr(fn._cache, "_cache_file"):
        return False
    cache = fn._cache
    fn._cache = _CacheOnly(cache)
    try:
        for sig in sigs:
            fn.compile(sig)
    except _Cold:
        return True
    finally:
        fn._cache = cache
    return False


class _Cold(Exception):
    """Numba's cache does not hold an overload: compiling it would run the compiler."""


class _CacheOnly:
    """A dispatcher's on-disk cache that stops `Dispatcher.compile` where it would
    compile from scratch (a miss raises `_Cold`): a hit is installed as Numba installs
    one (counted in `stats.cache_hits`), loaded by `load_cached`."""

    def __init__(self, cache):
        self._cache = cache

    def load_overload(self, sig, target_context):
        found = load_cached(self._cache, sig, target_context)
        if found is None:
            raise _Cold
        return found

    def __getattr__(self, name):
        return getattr(self._cache, name)


def load_cached(cache, sig, target_context):
    """What Numba's on-disk `cache` holds for `sig` (None on a miss), loaded without
    refreshing `target_context` first, as Numba's `Cache.load_overload` does.

    The refresh installs Numba's typing and lowering registries (importing ~60 modules,
    `scipy.linalg` among them: ~0.4 s of a warm compile), which compiling needs and
    loading does not: a cached overload is object code, linked against the symbols that
    Numba's runtime registers. Those are the target context's (its creation registers
    the C helpers and math functions), the NRT's (`rtsys.initialize`, done here, its code
    from Cuvil's cache: `nrt_cache`), the threading layer's (`threads.choose_layer`, done
    before any kernel is loaded), and the hash secret of `numba.cpython.hashing`, imported
    when an overload that uses it is unpickled. A compile that follows still refreshes:
    Numba's compiler does that itself.
    """
    load = getattr(cache, "_load_overload", None)
    if load is None:  # a Numba whose Cache has another shape: its own load, refresh and all
        return cache.load_overload(sig, target_context)
    nrt_cache.initialize(target_context)
    install(target_context.codegen())
    return load(sig, target_context)


@dataclass(frozen=True)
class Done:
    jobs: list[Job]  # the jobs compiled here or by workers, for this call
    workers: int  # worker shares handed out
    pids: tuple[int, ...] = ()  # the worker processes that compiled them


def compile_cold(jobs: list[tuple[Job, object]], workers: int | None = None) -> Done:
    """Compile the `(job, dispatcher)` pairs over up to `workers` processes (default:
    `$CUVIL_COMPILE_WORKERS`, else one per core), this one included. Jobs not in the
    result's `jobs` are left to the caller (fewer than two left after the pioneers)."""
    workers = min(len(jobs), workers or worker_count())
    if workers < 2:
        return Done([], 0)
    by_path = {job.path: fn for job, fn in jobs}
    first, rest = _pioneers([job for job, _ in jobs], cold_drivers(_helper_modules(jobs)))
    for job in first:
        _compile_here(job, by_path[job.path])
    if len(rest) < 2:
        return Done(first, 0)
    shares = _balance(rest, min(workers, len(rest)))
    futures = [_start(share, len(shares) - 1) for share in shares[1:]]
    for job in shares[0]:
        _compile_here(job, by_path[job.path])
    if wait(futures, timeout=WORKER_TIMEOUT_S).not_done:  # a worker stuck: stop them all
        _executor(len(futures)).shutdown(wait=False, kill_workers=True)
    pids = tuple(f.result() for f in futures
                 if f.done() and not f.cancelled() and f.exception() is None)
    return Done(first + rest, len(futures), pids)


def cold_drivers(helpers: dict[str, str]) -> set[str]:
    """The shared drivers among `helpers` (name -> runtime module) compiled neither in this
    process nor ever before (no index file in their on-disk cache, `numba_cache`). A helper
    that is an `overload` (`vmath.verf`) is inlined where it is called: never cold. The
    kernels' modules imported each helper's module already."""
    cold = set()
    for name, module in helpers.items():
        fn = getattr(sys.modules.get(module), name, None)
        if fn is not None and hasattr(fn, "overloads") and not fn.overloads and \
                not os.path.exists(fn._cache._cache_file._index_path):
            cold.add(name)
    return cold


def _helper_modules(jobs) -> dict[str, str]:
    return {name: module for job, _ in jobs for name, module in job.helpers}


def _pioneers(jobs: list[Job], cold: set[str]) -> tuple[list[Job], list[Job]]:
    """(jobs to compile here first, one per driver never compiled; the others)."""
    first = []
    for job in jobs:
        names = {name for name, _ in job.helpers}
        if cold & names:
            first.append(job)
            cold -= names
    return first, [job for job in jobs if job not in first]


def _compile_here(job: Job, fn) -> None:
    for sig in job.signatures:
        try:
            fn.compile(decode(sig))
        except Exception:  # noqa: BLE001  (the caller compiles it again and reports)
            return


def worker_count() -> int:
    """`$CUVIL_COMPILE_WORKERS` (1: never start workers), else the cores this process
    may run on."""
    text = os.environ.get("CUVIL_COMPILE_WORKERS", "").strip()
    if text:
        if not text.isdigit() or int(text) < 1:
            raise CuvilError(f"CUVIL_COMPILE_WORKERS must be a whole number of processes, "
                             f"1 or more, not {text!r}")
        return int(text)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1


def _balance(jobs: list[Job], n: int) -> list[list[Job]]:
    """`n` shares of about equal weight (the heaviest job first, to the lightest share)."""
    shares: list[list[Job]] = [[] for _ in range(n)]
    loads = [0.0] * n
    for job in sorted(jobs, key=lambda j: -j.weight):
        i = loads.index(min(loads))
        shares[i].append(job)
        loads[i] += job.weight
    return shares


def _start(share: list[Job], shares: int) -> Future:
    """The share compiled by a worker of the reusable executor (of at least `shares`
    workers); its result is the worker's process id (a worker that dies fails the future:
    the caller compiles the share)."""
    return _executor(shares).submit(compile_share,
                                    [(j.path, j.name, j.signatures) for j in share])


def _executor(shares: int):
    """loky's reusable executor, of at least `shares` workers (one per core but this
    process's, unless more shares are asked for)."""
    return get_reusable_executor(max_workers=max(shares, worker_count() - 1),
                                 timeout=IDLE_S, initializer=_warm_up)


def _warm_up() -> None:
    """A worker's start: the threading layer, and the host target's own preparation (BLAS
    single-threaded), as the parent sets them."""
    from cuvil.ir.devices import HOST, device
    from cuvil.runtime.threads import choose_layer

    choose_layer()
    device(HOST).prepare()


def compile_share(share: list[tuple[str, str, tuple]]) -> int:
    """In a worker: compile each (module file, function, signatures); a failure skips to
    the next job. Returns this process's id."""
    from cuvil.runtime.module_cache import import_file, module_name

    for path, name, signatures in share:
        known = sys.modules.get(module_name(path))
        if known is not None and known.__file__ != path:  # imported from another cache
            del sys.modules[module_name(path)]  # directory: its code would land there
        try:
            fn = getattr(import_file(path), name)
            for sig in signatures:
                fn.compile(decode(sig))
        except Exception:  # noqa: BLE001,S112  (the parent compiles it and reports)
            continue
    return os.getpid()
