"""`CudaTarget`: cost parameters of the GPU and its kernel generators.

Kernels are plain `numba.cuda` functions decorated with the runtime's `cuda_kernel`
(`cuvil.targets.cuda.runtime.launch`), which compiles them and launches one thread per output
element in a grid-stride loop (a tiled kernel: the block its `KernelSpec.launch` states):
the generated text stays readable and the same under the CUDA simulator
(`NUMBA_ENABLE_CUDASIM=1`) and on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuvil.lower.spec import Unsupported
from cuvil.lower.target import Target
from cuvil.targets.cuda import PARAMS
from cuvil.targets.cuda.templates import (
    attention,
    conv,
    elementwise,
    gemm,
    indexing,
    mlp,
    movement,
    pool,
    recurrent,
    rows,
    transfer,
)

# Device functions a kernel body may call (`cuvil.targets.cuda.runtime.device`), by name.
DEVICE_FUNCTIONS = ("vexp", "vtanh", "verf", "vsigmoid", "vmax", "vamax", "vmaximum",
                    "vminimum", "vrsqrt")
GENERATORS = {"elementwise": elementwise.generate, "gemm": gemm.generate,
              "rows": rows.generate, "conv": conv.generate, "pool": pool.generate,
              "attention": attention.generate, "transfer": transfer.generate,
              "recurrent": recurrent.generate, "concat": movement.generate,
              "gather": movement.generate, "source": movement.generate,
              "scan": indexing.generate, "index": indexing.generate, "mlp": mlp.generate}
# The kernel families (`OpDef.lowering`) this target has no kernel for, and why: their ops
# run through torch on the host (`fallback_policy="cpu"`). Every other family the CPU
# lowers has a generator here.
WITHOUT_KERNEL = {"qgemm": "int8 GEMMs have no CUDA kernel",
                  "qconv": "int8 convolutions have no CUDA kernel"}


def _refuse(reason: str):
    """The generator of a family without a kernel: it refuses every group, saying why."""

    def generate(group, ctx):
        raise Unsupported(reason)

    return generate


GENERATORS.update({family: _refuse(why) for family, why in WITHOUT_KERNEL.items()})


@dataclass
class CudaTarget(Target):
    """numba.cuda on one GPU; figures from `PARAMS` (an H200-class device, PCIe link)."""

    name: str = "cuda"
    gflops: float = PARAMS["gflops"]
    gbps: float = PARAMS["gbps"]
    launch_us: float = PARAMS["launch_us"]
    device: str = "cuda"
    link_gbps: float = PARAMS["link_gbps"]
    kernel_decorator: str = "@cuda_kernel(fastmath={fastmath}{launch})"
    parallel_decorator: str = "@cuda_kernel(fastmath={fastmath}{launch})"

    def __post_init__(self):
        if not self.generators:
            self.generators = dict(GENERATORS)

    @property
    def cost_params(self) -> dict[str, float]:
        """The roofline's figures, the link's, and the device limits tiles are chosen
        within (`templates.tiling`)."""
        limits = {k: v for k, v in PARAMS.items() if k not in ("gflops", "gbps", "launch_us")}
        return {**super().cost_params, **limits, "link_gbps": self.link_gbps}

    def imports(self, body: str) -> str:
        lines = ["import math", "import numpy as np", "from numba import cuda"]
        drivers = [n for n in ("cuda_kernel", "transfer", *DEVICE_FUNCTIONS) if f"{n}(" in body]
        if drivers:
            lines.append(f"from cuvil.targets.cuda.runtime import {', '.join(drivers)}")
        return "\n".join(lines) + "\n"
