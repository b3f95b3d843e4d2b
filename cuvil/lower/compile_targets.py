"""The targets a compile is asked for (`CompileOptions.targets`), read against the target
registry (`lower/target.py`), which the options' own module sits below:

    options = checked(CompileOptions.of(target=["cuda", "cpu"]))  # names known, policy set
    options = present(options)          # the targets whose devices are here
    sole_device(options.targets)        # the device a graph is placed on whole (`ir/place.py`)
    host_only(options.targets)          # whether the one target is the host's own
    device_costs(options.targets)       # the parameters the optimizer prices each device with
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import replace
from typing import Any

from cuvil.errors import CuvilError
from cuvil.ir.devices import HOST, device, device_target
from cuvil.lower.target import get_target, target_names
from cuvil.options import CompileOptions


def checked(options: CompileOptions) -> CompileOptions:
    """`options` with each target registered (a target with no backend is a one-line
    `CuvilError`) and the fallback policy the targets imply where none is given: `"error"`
    where the targets are one device off the host (every op runs there), `"cpu"`
    otherwise."""
    known = target_names()
    for name in options.targets:
        if name not in known:
            raise CuvilError(f"no backend for target {name!r}; available targets: "
                             f"{', '.join(known)} (cuvil.register_target adds one)")
    if options.fallback_policy is not None:
        return options
    policy = "cpu" if sole_device(options.targets) is None else "error"
    return replace(options, fallback_policy=policy)


def present(options: CompileOptions) -> CompileOptions:
    """`options` for the devices that are here: a target whose device is absent (its
    `require` hook raises) is dropped with one warning while another is left; the sole
    target's absence is its one-line `CuvilError`."""
    if host_only(options.targets):
        return options
    here, absent = [], []
    for name in options.targets:
        try:
            device(get_target(name).device).require()
            here.append(name)
        except CuvilError as e:
            absent.append((name, e))
    if not here:
        name, error = absent[0]
        raise CuvilError(f"target {name!r}: {error}")
    if absent:
        warnings.warn(f"compiling for {', '.join(here)} alone: "
                      + "; ".join(f"target {n!r}: {e}" for n, e in absent), stacklevel=3)
    return replace(options, targets=tuple(here))


def host_only(targets: tuple[str, ...]) -> bool:
    """Whether the one target of `targets` is the host's own (the CPU target)."""
    return tuple(targets) == (device_target()[HOST],)


def sole_device(targets: tuple[str, ...]) -> str | None:
    """The device every node is placed on before the optimizer (`ir/place.py`): that of
    the targets when they all compute one device that is not the host; None when the host
    is among them (extraction chooses, or there is nothing to choose)."""
    if host_only(targets):
        return None
    placed = {get_target(name).device for name in targets}
    return placed.pop() if len(placed) == 1 and HOST not in placed else None


def device_costs(chosen: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """The cost parameters of every registered device's target and of each `chosen`
    target, by name, where each IR device is priced by the first chosen target that
    computes it (`target="cpu1"` prices the `cpu` device with cpu1's parameters): the
    optimizer's cost model receives targets as data."""
    params = _registered_params((*device_target().values(), *chosen))
    for name in reversed(chosen):
        params[get_target(name).device] = params[name]
    return params


def _registered_params(names: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The cost parameters of each of the `names` that is a registered compile target."""
    out = {}
    for name in names:
        with contextlib.suppress(CuvilError):
            out[name] = dict(get_target(name).cost_params)
    return out
