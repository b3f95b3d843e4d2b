"""`CompileOptions`: everything a compile or an optimize is asked for besides the model and
its example inputs, checked once, frozen, and read by every stage from one value.

    options = CompileOptions.of(target="cpu", limits={"time": 10}, disable=["fusion"])
    options.optimizer(hints)      # the optimizer's `egraph.options.Options`
    options.lowering()            # `runtime.compile_graph`'s keyword arguments
    options.optimizer_key(hints)  # what the compile cache's key says of them
    options.program_key(threads)  # what the program cache's key says of them

What the caches key on is said here, next to the fields, so that a new option cannot be
missed by a key.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cuvil.egraph.limits import Limits, check_strategy
from cuvil.egraph.options import Options
from cuvil.errors import CuvilError


@dataclass(frozen=True, eq=False)
class CompileOptions:
    """What `cuvil.compile` and `cuvil.optimize` take besides the model (their docstrings
    say what each does)."""

    rules: Any = None
    targets: tuple[str, ...] = ("cpu",)
    dynamic_shapes: Any = None
    fallback: bool = True
    threads: int | None = None
    limits: Limits = field(default_factory=Limits)
    disable: tuple[str, ...] = ()
    fuse_elementwise: bool = True
    quantize: Any = None
    fallback_policy: str = "cpu"
    strategy: str = "latency"
    verify: bool = True
    extract: str = "auto"
    cache: bool = True
    trace: str | Path | None = None

    @classmethod
    def of(cls, *, target: str | Sequence[str] = "cpu", limits: Any = None,
           disable: Sequence[str] = (), strategy: str = "latency", **rest: Any
           ) -> CompileOptions:
        """The options for a call's keyword arguments, each checked: a one-line
        `CuvilError` for an unknown target, limit or strategy."""
        return cls(targets=targets_of(target), limits=as_limits(limits),
                   disable=tuple(disable), strategy=check_strategy(strategy), **rest)

    @property
    def host_only(self) -> bool:
        """Whether the one target is the host's own (the CPU target)."""
        from cuvil.ir.devices import HOST, device_target

        return self.targets == (device_target()[HOST],)

    @property
    def sole_device(self) -> str | None:
        """The device every node is placed on before the optimizer (`ir/place.py`): that
        of the targets when they all compute one device that is not the host; None when
        the host is among them (extraction chooses, or there is nothing to choose)."""
        from cuvil.ir.devices import HOST
        from cuvil.lower.target import get_target

        placed = {get_target(name).device for name in self.targets}
        return placed.pop() if len(placed) == 1 and HOST not in placed else None

    def optimizer(self, hints: dict[str, int]) -> Options:
        """The optimizer's options, with `hints` (the symbolic dims' example sizes)."""
        from cuvil.ir.devices import device_target

        return Options(targets=self.targets, limits=self.limits, extract=self.extract,
                       hints=hints, strategy=self.strategy,
                       device_params=device_costs(self.targets,
                                                  (*device_target().values(), *self.targets)))

    def lowering(self) -> dict[str, Any]:
        """`runtime.compile_graph`'s keyword arguments, but for the sizes."""
        return {"target": self.targets, "fallback": self.fallback, "threads": self.threads,
                "fuse_elementwise": self.fuse_elementwise,
                "fallback_policy": self.fallback_policy}

    def optimizer_key(self, hints: dict[str, int]) -> dict[str, Any]:
        """What the optimized graph depends on besides the graph and the rules."""
        return {"targets": _target_params(self.targets), "limits": repr(self.limits),
                "extract": self.extract, "disable": self.disable,
                "hints": sorted(hints.items()), "strategy": self.strategy,
                "verify": self.verify}

    def program_key(self, threads: int) -> dict[str, str]:
        """What a compiled program depends on besides the model and the rules, as text
        (the model's shapes and dims are in its fingerprint)."""
        return {"targets": repr(self.targets), "fallback": repr(self.fallback),
                "disable": repr(self.disable), "fuse_elementwise": repr(self.fuse_elementwise),
                "fallback_policy": repr(self.fallback_policy),
                "strategy": repr(self.strategy), "verify": repr(self.verify),
                "limits": repr(self.limits), "threads": str(threads)}


def as_limits(limits: Any) -> Limits:
    """`limits=` as `Limits`: None, a `Limits`, or a dict of its fields."""
    if limits is None:
        return Limits()
    if isinstance(limits, Limits):
        return limits
    if isinstance(limits, dict):
        known = {f.name for f in fields(Limits)}
        unknown = set(limits) - known
        if unknown:
            raise CuvilError(f"unknown limit(s) {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(sorted(known))}")
        return Limits(**limits)
    raise CuvilError(f"limits must be a dict or cuvil Limits, not {type(limits).__name__}")


def targets_of(target: str | Sequence[str]) -> tuple[str, ...]:
    """The target names, each one registered (a target with no backend is an error). The
    CPU's is always there: checking it alone imports no lowering (a warm compile's path)."""
    names = (target,) if isinstance(target, str) else tuple(target)
    if not names:
        raise CuvilError("at least one target is needed")
    from cuvil.ir.devices import HOST, device_target

    if set(names) == {device_target()[HOST]}:
        return names
    from cuvil.lower.custom import available_targets

    known = available_targets()
    for name in names:
        if name not in known:
            raise CuvilError(f"no backend for target {name!r}; available targets: "
                             f"{', '.join(known)} (cuvil.register_target adds one)")
    return names


def _target_params(names: tuple[str, ...]) -> list[tuple[str, Any]]:
    """Each target with the cost parameters it registered (they steer extraction)."""
    params = device_params(names)
    return [(name, sorted(params[name].items()) if name in params else None)
            for name in names]


def device_params(names: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """The cost parameters of each of the `names` that is a registered compile target: the
    optimizer's cost model receives targets as data."""
    from cuvil.lower.target import get_target

    out = {}
    for name in names:
        with contextlib.suppress(CuvilError):
            out[name] = dict(get_target(name).cost_params)
    return out


def device_costs(chosen: tuple[str, ...], names: tuple[str, ...]) -> dict[str, dict]:
    """`device_params(names)`, where each IR device is priced by the first chosen target
    that computes it (`target="cpu1"` prices the `cpu` device with cpu1's parameters)."""
    from cuvil.lower.target import get_target

    params = device_params(names)
    for name in reversed(chosen):
        params[get_target(name).device] = params[name]
    return params
