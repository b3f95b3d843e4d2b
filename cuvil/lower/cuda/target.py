"""`CudaTarget`: cost parameters of the GPU and its kernel generators.

Kernels are plain `numba.cuda` functions decorated with the runtime's `cuda_kernel`
(`cuvil.runtime.cuda.launch`), which compiles them and launches one thread per output
element in a grid-stride loop: the generated text stays readable and the same under the
CUDA simulator (`NUMBA_ENABLE_CUDASIM=1`) and on a GPU.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from cuvil.egraph.cost import DEFAULT_PARAMS
from cuvil.lower.target import Generator, Target

# Device functions a kernel body may call (`cuvil.runtime.cuda.device`), by name.
DEVICE_FUNCTIONS = ("vexp", "vtanh", "verf", "vsigmoid", "vmax", "vamax", "vmaximum",
                    "vminimum", "vrsqrt")


def _template(module: str) -> Generator:
    def generate(group, ctx):
        return importlib.import_module(f"cuvil.lower.cuda.{module}").generate(group, ctx)

    generate.__qualname__ = f"cuda.{module}.generate"
    return generate


@dataclass
class CudaTarget(Target):
    """numba.cuda on one GPU; figures from DEFAULT_PARAMS (an H200-class device, PCIe link)."""

    name: str = "cuda"
    gflops: float = DEFAULT_PARAMS["cuda"]["gflops"]
    gbps: float = DEFAULT_PARAMS["cuda"]["gbps"]
    launch_us: float = DEFAULT_PARAMS["cuda"]["launch_us"]
    device: str = "cuda"
    link_gbps: float = DEFAULT_PARAMS["cuda"]["link_gbps"]
    kernel_decorator: str = "@cuda_kernel(fastmath={fastmath})"
    parallel_decorator: str = "@cuda_kernel(fastmath={fastmath})"

    def __post_init__(self):
        if not self.generators:
            self.generators = {name: _template(module) for name, module in [
                ("elementwise", "elementwise"), ("gemm", "gemm"), ("rows", "rows"),
                ("conv", "conv"), ("pool", "pool"), ("attention", "attention"),
                ("transfer", "transfer"), ("recurrent", "recurrent")]}

    @property
    def cost_params(self) -> dict[str, float]:
        return {**super().cost_params, "link_gbps": self.link_gbps}

    def imports(self, body: str) -> str:
        lines = ["import math", "import numpy as np", "from numba import cuda"]
        drivers = [n for n in ("cuda_kernel", "transfer", *DEVICE_FUNCTIONS) if f"{n}(" in body]
        if drivers:
            lines.append(f"from cuvil.runtime.cuda import {', '.join(drivers)}")
        return "\n".join(lines) + "\n"
