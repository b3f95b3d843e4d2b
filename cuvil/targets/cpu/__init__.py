"""The CPU target: Numba kernels on the host, whose arrays are numpy arrays in host memory.

`target.CpuTarget` lowers with the templates of `templates/`; the code they generate calls
the shared kernels of `kernels/` (the table is `helpers.py`), compiled once per
installation; `recipes.py` computes the constants in its kernels' own formats. `PARAMS` are
its roofline figures, measured on the 2-core reference machine (GEMM 150-167 GFLOP/s
through `np.dot` in Numba, DRAM copy 20-24 GB/s, ~1-2 us per call).
"""

from __future__ import annotations

from cuvil import aligned
from cuvil.ir.devices import HOST, Device
from cuvil.targets import register_target
from cuvil.targets.cpu.recipes import RECIPES

PARAMS = {"gflops": 150.0, "gbps": 20.0, "launch_us": 2.0}


def _prepare() -> None:
    """BLAS single-threaded: parallelism comes from Numba's pool
    (`kernels/blas_threads.py`)."""
    from cuvil.targets.cpu.kernels.blas_threads import single_threaded_blas

    single_threaded_blas()


def _code_key() -> str:
    """The BLAS products call where it is not scipy's OpenBLAS (`kernels/mkl.py`)."""
    from cuvil.targets.cpu.kernels.mkl import library

    blas = library()
    return "" if blas == "openblas" else blas


def _build():
    from cuvil.targets.cpu.target import CpuTarget  # its templates load with it

    return CpuTarget()


register_target(Device(HOST, target="cpu", params=PARAMS, allocate=aligned.empty,
                       prepare=_prepare, recipes=RECIPES, code_key=_code_key), _build)
