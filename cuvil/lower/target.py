"""Compile targets: kernel generators per template, plus the cost parameters the optimizer's
default roofline uses (`launch_us + max(flops / (1e3 * gflops), bytes / (1e3 * gbps))`).

`CpuTarget` is the first. A CUDA target (a later issue) or a user's target registers its own
generators and decorators with `register_target`, without touching the CPU code:

    cpu = get_target("cpu")
    register_target(Target("mycpu", gflops=50, gbps=10, launch_us=2,
                           generators={**cpu.generators, "gemm": my_gemm}))
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

from cuvil.egraph.cost import DEFAULT_PARAMS
from cuvil.errors import CuvilError

Generator = Callable  # (group, LowerContext) -> KernelSpec


@dataclass
class Target:
    """What lowering needs to know about a machine."""

    name: str
    gflops: float  # sustained GEMM throughput
    gbps: float  # sustained memory bandwidth
    launch_us: float  # fixed cost of one kernel call
    generators: dict[str, Generator] = field(default_factory=dict)
    device: str = "cpu"  # the IR device (`TensorType.device`) whose values it computes
    # decorators of generated kernels (serial / parallel)
    kernel_decorator: str = ("@njit(cache=True, nogil=True, error_model='numpy', "
                             "fastmath={fastmath})")
    parallel_decorator: str = ("@njit(cache=True, nogil=True, parallel=True, "
                               "error_model='numpy', fastmath={fastmath})")

    @property
    def threaded(self) -> bool:
        """Whether its kernels may use threads (a serial target's decorators are alike)."""
        return self.parallel_decorator != self.kernel_decorator

    def imports(self, body: str) -> str:
        """The import block of a generated module whose code is `body`."""
        from cuvil.lower.templates.helpers import helper_text, used_helpers

        lines = ["import math\n"] if "math." in body else []
        lines.append("import numpy as np")
        names = [n for n in ("njit", "prange") if f"{n}(" in body]
        if names:
            lines.append(f"from numba import {', '.join(names)}")
        lines += helper_text(used_helpers(body))
        return "\n".join(lines) + "\n"

    def generator(self, template: str) -> Generator | None:
        return self.generators.get(template)

    @property
    def cost_params(self) -> dict[str, float]:
        return {"gflops": self.gflops, "gbps": self.gbps, "launch_us": self.launch_us}


_TARGETS: dict[str, Target | Callable[[], Target]] = {}


def register_target(target: Target | Callable[[], Target], name: str | None = None) -> None:
    """Add a target (or a factory building it on first use) under its name."""
    key = name or target.name
    _TARGETS[key] = target


def get_target(name: str | Target) -> Target:
    if isinstance(name, Target):
        return name
    if name not in _TARGETS:
        known = ", ".join(sorted(_TARGETS))
        raise CuvilError(f"unknown target {name!r} (known: {known})")
    entry = _TARGETS[name]
    if not isinstance(entry, Target):
        entry = _TARGETS[name] = entry()
    return entry


def _template(module: str) -> Generator:
    """The `generate` of a template module, imported on first use: asking a target for its
    cost parameters (the optimizer does) must not import Numba."""

    def generate(group, ctx):
        return importlib.import_module(f"cuvil.lower.templates.{module}").generate(group, ctx)

    generate.__qualname__ = f"{module}.generate"
    return generate


@dataclass
class CpuTarget(Target):
    """Numba on the host CPU; throughputs measured on the 2-core reference machine (GEMM
    150-167 GFLOP/s through `np.dot` in Numba, DRAM copy 20-24 GB/s, ~1-2 us per call)."""

    name: str = "cpu"
    gflops: float = DEFAULT_PARAMS["cpu"]["gflops"]
    gbps: float = DEFAULT_PARAMS["cpu"]["gbps"]
    launch_us: float = DEFAULT_PARAMS["cpu"]["launch_us"]

    def __post_init__(self):
        if not self.generators:
            self.generators = {name: _template(module) for name, module in [
                ("elementwise", "elementwise"), ("gemm", "gemm"), ("rows", "reduction"),
                ("conv", "conv"), ("pool", "pool"), ("attention", "attention"),
                ("concat", "movement"), ("gather", "movement"), ("source", "movement"),
                ("recurrent", "recurrent"), ("scan", "indexing"), ("index", "indexing"),
                ("qgemm", "qgemm"), ("qconv", "qconv"),
                ("mlp", "mlp")]}


register_target(CpuTarget, "cpu")


def _cuda() -> Target:
    from cuvil.lower.cuda.target import CudaTarget  # imports no Numba until it lowers

    return CudaTarget()


register_target(_cuda, "cuda")
