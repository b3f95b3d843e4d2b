"""Thread policy of compiled graphs: Numba's threading layer, its settings, thread count.

Measured on the 2-core reference machine (docs/explanation/runtime.md):

* `workqueue` took 120-170 us to start each parallel region, and made torch's own
  convolutions 30 ms slow next to it: not an option here. `tbb` is not installed.
* `omp` starts a region in ~4 us. But Numba's OpenMP runtime (the system libgomp) is not
  torch's (torch ships its own), so two thread pools share two cores. With libgomp's default
  spin-waiting, a parallel kernel right after a torch op took 8 ms at p90, and a torch op
  right after a parallel kernel 32 ms: each pool's idle threads spin on the core the other
  pool needs until the scheduler preempts them.
* Making *Numba's* libgomp passive (its threads sleep instead of spinning) removes both
  stalls (p90 56 us and 0.4 ms) and leaves torch's pool, already loaded and still
  spin-waiting, as fast as before. So Cuvil sets `OMP_WAIT_POLICY=PASSIVE` only while
  Numba loads its OpenMP runtime, and restores the environment at once: torch, already
  initialised, never sees it (setting it for the whole process slows torch eager 2-5x).

* Launching Numba's OpenMP layer also sets torch's thread count to every core, once torch
  has read it (`torch.get_num_threads()`): `choose_layer` puts the user's count back.

Cuvil leaves everything alone when the user chose (`NUMBA_THREADING_LAYER`,
`OMP_WAIT_POLICY`, `GOMP_SPINCOUNT`) or when Numba launched its layer already. Small kernels
do not wake the pool at all (`PAR_MIN`). The thread count follows `threads=` or else
`torch.get_num_threads()`, and is set per call (Numba's setting is thread-local).
"""

from __future__ import annotations

import os

from cuvil import gc_pause

_PREFERRED = ("omp", "workqueue")


def choose_layer() -> str:
    """Select the threading layer (unless Numba launched one already), then launch it.

    Launching at compile time matters: kernels loaded from the cache may call parallel
    helpers, whose code needs the layer's symbols before it can be linked.
    """
    import numba
    import torch
    from numba.np.ufunc import parallel

    if parallel._is_initialized:
        return numba.threading_layer()
    # Decided before anything loads Numba's libgomp (`_available` imports it): the policy
    # is read once, when that library loads.
    passive = _own_openmp_runtime() and not any(
        os.environ.get(k) for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"))
    if passive:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    torch_threads = torch.get_num_threads()  # the launch sets it to every core (see above)
    try:
        if not os.environ.get("NUMBA_THREADING_LAYER"):
            numba.config.THREADING_LAYER = next(
                (layer for layer in _PREFERRED if _available(layer)), "default")
        parallel._launch_threads()
    finally:
        if passive:
            del os.environ["OMP_WAIT_POLICY"]
        if torch.get_num_threads() != torch_threads:
            torch.set_num_threads(torch_threads)
    return numba.threading_layer()


def _own_openmp_runtime() -> bool:
    """Whether Numba's libgomp would be a runtime of its own, not one torch already uses:
    asked before Numba's is loaded (it would be listed then)."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            loaded = {line.split()[-1] for line in maps if "libgomp" in line}
    except OSError:
        return False
    # torch's wheels ship their own libgomp inside the torch package; Numba's omppool links
    # the system one. If the system one is loaded already, its settings are fixed anyway.
    return all("/torch/" in p for p in loaded)


def _available(layer: str) -> bool:
    try:
        if layer == "omp":
            from numba.np.ufunc import omppool  # noqa: F401
        elif layer == "workqueue":
            from numba.np.ufunc import workqueue  # noqa: F401
        return True
    except ImportError:
        return False


def thread_count(threads: int | None) -> int:
    """The number of threads a compiled graph uses: `threads`, else torch's setting."""
    import numba

    if threads is None:
        import torch

        threads = torch.get_num_threads()
    if threads < 1:
        from cuvil.errors import CuvilError

        raise CuvilError(f"threads must be >= 1, got {threads}")
    return min(int(threads), numba.config.NUMBA_NUM_THREADS)


def active_layer() -> str:
    """The layer Numba launched (or will launch) for parallel kernels."""
    import numba
    from numba.np.ufunc import parallel

    return numba.threading_layer() if parallel._is_initialized else numba.config.THREADING_LAYER


def numba_startup() -> float:
    """Pay now what loading kernels from Numba's cache needs once per process: importing
    Numba, its threading layer, the CPU target (LLVM) and its runtime (NRT), otherwise
    paid by the first cache load; returns the seconds. The registries a compile needs
    (~0.4 s more) are left to the first compile (`compile_pool.load_cached`)."""
    import time

    start = time.perf_counter()
    with gc_pause.paused():  # as in cuvil.compile, which pays this otherwise
        choose_layer()
        from numba.core.registry import cpu_target

        from cuvil.runtime import nrt_cache

        nrt_cache.initialize(cpu_target.target_context)
    return time.perf_counter() - start
