"""The CUDA target: numba.cuda kernels generated from the same op definitions as the CPU's.

`target.CudaTarget` lowers; its generators (every family the CPU has but the int8 ones,
which `target.WITHOUT_KERNEL` declares) write `@cuda_kernel` functions that its runtime's
launcher compiles and launches over the output, and `transfer` lowers the `to_device`
conversions at device boundaries as copies. Its arrays live in device memory: the hooks
registered here allocate them, upload constants, wait for queued kernels and check a GPU
(or Numba's CUDA simulator, `NUMBA_ENABLE_CUDASIM=1`) is there; each imports `numba.cuda`
on first use.
`PARAMS` describe an H200-class device on a PCIe link; `placement.cvr` offers the
compute-heavy ops on the GPU (part of the stock library, firing with `has_target("cuda")`);
`fp16.cvr` offers f16 layers with f32 accumulation (`Quantize(activations="fp16")`: the
device has f16 kernels, `half_kernels`).
"""

from __future__ import annotations

from pathlib import Path

from cuvil.ir.devices import Device
from cuvil.targets import register_target

# The roofline's figures, then the limits the tiled kernels' tile sizes are chosen within
# (`templates.tiling`). H100 SXM and H200 are both compute capability 9.0, whose limits are
# the CUDA C++ Programming Guide's ("Technical Specifications per Compute Capability"):
# 1024 threads a block, warps of 32, 48 KiB of static shared memory a block (the
# `cuda.shared.array` kind; more needs dynamic shared memory, which the kernels do not
# use); both have 132 SMs (NVIDIA's H100 and H200 datasheets, SXM parts).
PARAMS = {"gflops": 50000.0, "gbps": 3000.0, "launch_us": 5.0, "link_gbps": 25.0,
          "smem_per_block": 49152, "max_threads_per_block": 1024, "warp_size": 32,
          "sm_count": 132}


def _allocate(n: int, dtype: str):
    import numpy as np

    from cuvil.targets.cuda.runtime import device_empty

    return device_empty(n, np.dtype(dtype))


def _upload(array):
    from cuvil.targets.cuda.runtime import upload

    return upload(array)


def _synchronize() -> None:
    from cuvil.targets.cuda.runtime import synchronize

    synchronize()


def _require() -> None:
    from cuvil.targets.cuda.runtime import require_gpu

    require_gpu()


def _build():
    from cuvil.targets.cuda.target import CudaTarget  # imports no Numba until it lowers

    return CudaTarget()


register_target(Device("cuda", target="cuda", params=PARAMS, host_memory=False,
                       allocate=_allocate, upload=_upload, synchronize=_synchronize,
                       require=_require, half_kernels=True,
                       rules=(Path(__file__).parent / "placement.cvr",
                              Path(__file__).parent / "fp16.cvr")),
                _build)
