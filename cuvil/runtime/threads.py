"""Thread policy of compiled graphs: Numba's threading layer and its thread count.

Measured on the 2-core reference machine (docs/explanation/runtime.md): Numba's `omp`
layer starts an empty `prange` in ~4 us and showed no stalls next to torch's own OpenMP
pool; the `workqueue` layer took 120-170 us per parallel region. So Cuvil asks for `omp`
(falling back to `workqueue` where the OpenMP runtime is missing), unless the user chose
a layer with `NUMBA_THREADING_LAYER`. It never sets `OMP_WAIT_POLICY`: passive waiting
slows torch eager 2-5x here. Small kernels do not wake the pool at all (`PAR_MIN`).

The layer must be chosen before Numba's first parallel launch; the thread count follows
`threads=` or else `torch.get_num_threads()`, and is set per call (it is thread-local).
"""

from __future__ import annotations

import os

_PREFERRED = ("omp", "workqueue")


def choose_layer() -> str:
    """Select the threading layer (unless Numba launched one already), then launch it.

    Launching at compile time matters: kernels loaded from the cache may call parallel
    helpers, whose code needs the layer's symbols before it can be linked.
    """
    import numba
    from numba.np.ufunc import parallel

    if not parallel._is_initialized and not os.environ.get("NUMBA_THREADING_LAYER"):
        for layer in _PREFERRED:
            if _available(layer):
                numba.config.THREADING_LAYER = layer
                break
    parallel._launch_threads()
    return numba.threading_layer()


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
