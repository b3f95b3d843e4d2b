"""The BLAS thread policy: scipy's OpenBLAS (the BLAS Numba's `np.dot` calls) runs one
thread, and Cuvil splits products between Numba's threads instead (`blas`). OpenBLAS's own
pthread pool spin-waits after each call; next to torch's OpenMP pool it made a 16-image
NCHW convolution take 255 ms instead of 8 ms, and torch's own convolution next to it 50 ms
instead of 1.5 ms. `single_threaded_blas()` sets this once per process (the CPU device's
`prepare` hook, `cuvil/targets/cpu/__init__.py`).
"""

from __future__ import annotations

import os

_blas_configured = False


def single_threaded_blas() -> None:
    """Make scipy's OpenBLAS (the one Numba's `np.dot` calls) single-threaded, once, unless
    OPENBLAS_NUM_THREADS is set; numpy's and torch's pools are left as they are."""
    global _blas_configured
    if _blas_configured or os.environ.get("OPENBLAS_NUM_THREADS"):
        return
    _blas_configured = True
    folder = _load_scipy_blas()
    if folder is not None and _set_openblas_threads(folder, 1):
        return
    from threadpoolctl import ThreadpoolController  # ~10 ms with torch's libraries loaded

    for lib in ThreadpoolController().lib_controllers:
        if lib.user_api == "blas" and f"scipy.libs{os.sep}" in lib.filepath:
            lib.set_num_threads(1)


def _load_scipy_blas():
    """Load scipy's OpenBLAS into the process: the shared library of
    `scipy.linalg.cython_blas` with its dependencies, without running the Python package
    `scipy.linalg` (importing it costs ~0.2 s, its array-API layer importing numpy.f2py,
    numpy.testing and more). The later import of `cython_blas` (by Numba's `np.dot`)
    finds the same library, with the threads set here. Returns scipy's folder, or None
    where the file is not found (then the import)."""
    import ctypes
    import importlib.machinery
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("scipy")
    for folder in spec.submodule_search_locations if spec else ():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(folder) / "linalg" / f"cython_blas{suffix}"
            if path.is_file():
                try:
                    ctypes.CDLL(str(path))
                    return Path(folder)
                except OSError:
                    break
    import scipy.linalg.cython_blas  # noqa: F401


def _set_openblas_threads(scipy_folder, threads: int) -> bool:
    """Set the thread count of the OpenBLAS in scipy's wheel (`scipy.libs/`, loaded by
    `_load_scipy_blas`) through its own setter, as threadpoolctl would without listing
    every loaded library; False where there is no such library or setter."""
    import ctypes

    libs = sorted(scipy_folder.parent.glob("scipy.libs/*openblas*.so*"))
    for path in libs if len(libs) == 1 else ():
        lib = ctypes.CDLL(str(path))  # already loaded: the same handle
        for name in ("scipy_openblas_set_num_threads", "openblas_set_num_threads",
                     "scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_"):
            setter = getattr(lib, name, None)
            if setter is not None:
                setter(ctypes.c_int(threads))
                return True
    return False
