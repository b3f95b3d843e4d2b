"""`cuvil.register_target`: a user's compile target from cost parameters and kernels.

    cuvil.register_target("cpu1", params={"gflops": 75, "gbps": 12, "launch_us": 1},
                          parallel=False)
    fast = cuvil.compile(model, inputs, target="cpu1")

A target brings the roofline parameters the optimizer prices its device with (`gflops`,
`gbps`, `launch_us`, and any other number a `.cvr` cost may read as `target.NAME`) and
kernel generators by family (`elementwise`, `gemm`, `rows`, `conv`, `pool`, `attention`,
`concat`, `gather`): a generator is `(group, LowerContext) -> KernelSpec`. Families it does
not bring are lowered by its `base` target's generators (the CPU's by default), so a target
that only changes costs, or brings one GEMM kernel, is one call. Rules can ask for it with
`has_target("cpu1")`. See docs/how-to/custom-target.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cuvil.errors import CuvilError
from cuvil.ir.devices import HOST
from cuvil.lower import target as targets

ROOFLINE = ("gflops", "gbps", "launch_us")


@dataclass
class CustomTarget(targets.Target):
    """A registered user target: a `Target` whose cost parameters may carry extra numbers."""

    extra: dict[str, float] = field(default_factory=dict)

    @property
    def cost_params(self) -> dict[str, float]:
        return {**super().cost_params, **self.extra}


def register_target(name: str, params: Mapping[str, float] | None = None,
                    kernels: Mapping[str, targets.Generator] | None = None, *,
                    device: str = HOST, base: str | None = "cpu",
                    parallel: bool = True) -> targets.Target:
    """Register (or replace) the target `name`; returns it. See the module docstring.

    `params` default to the base target's; `parallel=False` compiles every kernel serial
    (one thread: `prange` loops run as `range`)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise CuvilError(f"a target name is an identifier, not {name!r}")
    parent = targets.get_target(base) if base is not None else None
    values = dict(parent.cost_params) if parent is not None else {}
    values.update(params or {})
    missing = [k for k in ROOFLINE if k not in values]
    if missing:
        raise CuvilError(f"target {name}: params needs {', '.join(missing)} (no base target)")
    bad = [k for k, v in values.items() if not isinstance(v, int | float) or v < 0]
    if bad:
        raise CuvilError(f"target {name}: params {', '.join(bad)} must be numbers >= 0")
    generators = {**(parent.generators if parent is not None else {}), **(kernels or {})}
    serial = parent.kernel_decorator if parent is not None else targets.Target.kernel_decorator
    made = CustomTarget(name, float(values["gflops"]), float(values["gbps"]),
                        float(values["launch_us"]), generators, device,
                        extra={k: float(v) for k, v in values.items() if k not in ROOFLINE})
    if parent is not None:
        made.kernel_decorator = parent.kernel_decorator
        made.parallel_decorator = parent.parallel_decorator if parallel else serial
    elif not parallel:
        made.parallel_decorator = serial
    targets.register_target(made, name)
    return made


def available_targets() -> list[str]:
    """The names of the registered targets."""
    return targets.target_names()
