"""The devices a value may live on, and what every layer below a target's folder asks of one.

Each target folder (`cuvil/targets/<name>/`) registers its device here, through
`cuvil.targets.register_target`: its name (`TensorType.device`), the target that prices and
computes it, that target's roofline parameters, whether its arrays are numpy arrays in host
memory, and the hooks the runtime calls (allocate a planned buffer, upload a constant, wait
for queued kernels, check the device is there). The IR, the optimizer, lowering and the
runtime look devices up here and never test a device's name: a third device is one new
folder. `HOST` is the device of host memory, where a graph's inputs and outputs are.

The folders under `cuvil/targets/` are found by walking that folder, and imported on the
first lookup: the layers here sit below them and import none by name.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuvil.errors import CuvilError

HOST = "cpu"  # host memory: numpy arrays, torch's CPU tensors
TARGETS_FOLDER = Path(__file__).resolve().parents[1] / "targets"


def _nothing(*_args: Any) -> None:
    return None


@dataclass(frozen=True)
class Device:
    """A device and its hooks (see the module docstring)."""

    name: str
    target: str  # the target that computes its values, and whose parameters price them
    params: Mapping[str, float] = field(default_factory=dict)  # gflops, gbps, launch_us, ...
    host_memory: bool = True  # its arrays are numpy arrays the host reads directly
    allocate: Callable[[int, str], Any] | None = None  # (elements, numpy dtype) -> flat array
    upload: Callable[[Any], Any] = lambda array: array  # a host constant -> the device's copy
    synchronize: Callable[[], None] | None = None  # waits for its queued kernels, if it queues
    require: Callable[[], None] = _nothing  # raises when the device is not there
    prepare: Callable[[], None] = _nothing  # readies the process before kernels compile, run
    # derived-constant recipes its templates declare (`LowerContext.derive`): name ->
    # (**inputs) -> {part: array}, run once per compiled graph (`cuvil.runtime.derived`)
    recipes: Mapping[str, Callable[..., dict]] = field(default_factory=dict)
    rules: tuple[Path, ...] = ()  # its placement rules (`.cvr`), part of the stock library
    half_kernels: bool = False  # its kernels read and write f16 (`Quantize(activations="fp16")`)
    # what its compiled code depends on beyond Cuvil's source (the BLAS it calls), in the
    # runtime's cache key: "" for nothing
    code_key: Callable[[], str] = lambda: ""


_DEVICES: dict[str, Device] = {}
_loaded = False


def register_device(device: Device) -> Device:
    """Add (or replace) `device`; returns it."""
    _DEVICES[device.name] = device
    return device


def load_targets() -> None:
    """Import every target folder under `cuvil/targets/` once (each registers itself)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for found in pkgutil.iter_modules([str(TARGETS_FOLDER)], prefix="cuvil.targets."):
        if found.ispkg:
            importlib.import_module(found.name)


def device(name: str) -> Device:
    """The registered device `name`; a one-line `CuvilError` for an unknown one."""
    load_targets()
    if name not in _DEVICES:
        raise CuvilError(f"unknown device {name!r} (known: {', '.join(sorted(_DEVICES))})")
    return _DEVICES[name]


def recipes() -> dict[str, Callable[..., dict]]:
    """Every registered device's derived-constant recipes, by name."""
    load_targets()
    return {name: r for d in _DEVICES.values() for name, r in d.recipes.items()}


def rule_files() -> list[Path]:
    """The rule files the registered devices bring, by device name."""
    load_targets()
    return [path for name in sorted(_DEVICES) for path in _DEVICES[name].rules]


def known_devices() -> set[str]:
    load_targets()
    return set(_DEVICES)


def computes_half(target: str) -> bool:
    """Whether the device target `target` computes has f16 kernels."""
    load_targets()
    return any(d.half_kernels for d in _DEVICES.values() if d.target == target)


def on_host(name: str) -> bool:
    """Whether arrays of device `name` are numpy arrays in host memory."""
    return device(name).host_memory


def device_params() -> dict[str, dict[str, float]]:
    """Target name -> the roofline parameters its device registered."""
    load_targets()
    return {d.target: dict(d.params) for d in _DEVICES.values()}


def device_target() -> dict[str, str]:
    """Device name -> the name of the target that computes it."""
    load_targets()
    return {d.name: d.target for d in _DEVICES.values()}
