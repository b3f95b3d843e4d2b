"""Targets: each folder here is one machine Cuvil compiles for, and holds all of it.

A target folder (`cpu/`, `cuda/`) has its kernel templates, the kernels and runtime its
generated code calls, its cost parameters, its placement rules, and its device hooks
(allocate, upload, synchronize). Its `__init__.py` makes one `register_target` call: the
device goes to the registry the lower layers look devices up in (`cuvil.ir.devices`), and
the lowering target, built on first use, to `cuvil.lower.target`. The folders here are
found and imported on the first lookup; a target elsewhere (a user's package) registers
itself the same way when it is imported.

    register_target(Device("toy", target="toy", params={...}, allocate=aligned.empty),
                    build=lambda: ToyTarget())
"""

from __future__ import annotations

from collections.abc import Callable

from cuvil.ir.devices import Device, register_device
from cuvil.lower import target as lowering

__all__ = ["Device", "register_target"]


def register_target(device: Device, build: Callable[[], lowering.Target]) -> Device:
    """Register a target: its device (and hooks) now, the lowering target `build` makes
    on first use, under the device's target name. Returns the device."""
    register_device(device)
    lowering.register_target(build, device.target)
    return device
