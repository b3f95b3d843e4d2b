"""Compile targets: kernel generators per template, plus the cost parameters the optimizer's
default roofline uses (`launch_us + max(flops / (1e3 * gflops), bytes / (1e3 * gbps))`).

Each target lives in its own folder under `cuvil/targets/` and registers itself there
(`cuvil.targets.register_target`); a user's target registers its own generators and
decorators here without touching any of them:

    cpu = get_target("cpu")
    register_target(Target("mycpu", gflops=50, gbps=10, launch_us=2,
                           generators={**cpu.generators, "gemm": my_gemm}))
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from cuvil.errors import CuvilError
from cuvil.ir.devices import HOST, device_target, load_targets

Generator = Callable  # (group, LowerContext) -> KernelSpec


@dataclass
class Target:
    """What lowering needs to know about a machine."""

    name: str
    gflops: float  # sustained GEMM throughput
    gbps: float  # sustained memory bandwidth
    launch_us: float  # fixed cost of one kernel call
    generators: dict[str, Generator] = field(default_factory=dict)
    device: str = HOST  # the IR device (`TensorType.device`) whose values it computes
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
        """The import block of a generated module whose code is `body`: by default that of
        the target that owns this target's device (whose kernels these build on)."""
        owner = self._device_owner()
        if owner is None or type(owner).imports is Target.imports:
            raise CuvilError(f"target {self.name}: no target of device {self.device} "
                             "says how its modules import their helpers")
        return owner.imports(body)

    def generator(self, template: str) -> Generator | None:
        return self.generators.get(template)

    # What partitioning asks of the host's target (`cuvil.lower.compile.generate`): the
    # nodes of an attention pattern a template lowers as one group, and a pass over the
    # groups afterwards. A target that brings neither groups nodes one op at a time.
    def attention_matcher(self) -> Callable | None:
        """(graph, partition, softmax node) -> the names of an attention pattern, or None.
        Partitioning asks it of instances of ops declared `kernel attention`, and of the
        graph itself: attention the model writes out reaches lowering as plain nodes where
        the `fusion_attention` rules' guards refuse it, and no composite op stands for it."""
        return None

    def regroup(self, groups: list, graph, own: Callable) -> list:
        """`groups` rearranged for this target's templates (`own(group)`: whether the group
        is lowered by this target's generator of its family)."""
        return groups

    def _device_owner(self) -> Target | None:
        """The target that owns this target's device, unless that is this target's class."""
        owner = get_target(device_target()[self.device])
        return None if type(owner) is type(self) and owner.name == self.name else owner

    @property
    def helpers(self) -> dict[str, str]:
        """The shared functions its generated code may call: name -> the module defining
        it (the runtime compiles those a kernel calls before the kernel); by default those
        of the target that owns its device."""
        owner = self._device_owner()
        return {} if owner is None else owner.helpers

    def helpers_called(self, body: str) -> dict[str, str]:
        """The helpers generated code `body` calls, in the table's order."""
        return {name: module for name, module in self.helpers.items()
                if re.search(rf"\b{name}(\(|  #)", body)}

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
    load_targets()
    if name not in _TARGETS:
        known = ", ".join(sorted(_TARGETS))
        raise CuvilError(f"unknown target {name!r} (known: {known})")
    entry = _TARGETS[name]
    if not isinstance(entry, Target):
        entry = _TARGETS[name] = entry()
    return entry


def target_names() -> list[str]:
    """The names of the registered targets."""
    load_targets()
    return sorted(_TARGETS)
