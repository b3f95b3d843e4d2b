"""The CUDA runtime: what kernels generated for the `cuda` target call by name.

`cuda_kernel` (the decorator of every generated CUDA kernel, `launch.py`), `transfer`
(the copy a `to_device` between the host and the device lowers to, `memory.py`) and the
device functions a kernel body may call (`device.py`). Importing it imports `numba.cuda`:
set `NUMBA_ENABLE_CUDASIM=1` before that to run everything under Numba's CUDA simulator.
"""

from cuvil.targets.cuda.runtime.device import (
                                       vamax,
                                       verf,
                                       vexp,
                                       vmax,
                                       vmaximum,
                                       vminimum,
                                       vrsqrt,
                                       vsigmoid,
                                       vtanh,
)
from cuvil.targets.cuda.runtime.launch import cuda_kernel, require_gpu, simulated, synchronize
from cuvil.targets.cuda.runtime.memory import device_empty, is_device, to_host, transfer, upload

__all__ = ["cuda_kernel", "device_empty", "is_device", "require_gpu", "simulated",
           "synchronize", "to_host", "transfer", "upload", "vamax", "verf", "vexp", "vmax",
           "vmaximum", "vminimum", "vrsqrt", "vsigmoid", "vtanh"]
