"""`CompileOptions`: everything a compile or an optimize is asked for besides the model and
its example inputs, as plain data, frozen, and read by every stage from one value: the
pipeline, the optimizer, the lowering and the caches.

    options = CompileOptions.of(target="cpu", limits={"time": 10}, disable=["fusion"])
    options.optimizer_key(hints, device_params)  # what the compile cache's key says of them
    options.program_key(threads)                 # what the program cache's key says of them

A module of the base layer, importing no other Cuvil package, so that each layer (the
optimizer included) takes this one value. What needs the target registry lives beside it,
in `cuvil/lower/compile_targets.py`: the targets checked and the default fallback policy
(`checked`), the targets whose devices are here (`present`), the sole device a graph is
placed on, and the parameters the optimizer prices each device with. What the caches key
on is said here, next to the fields, so that a new option cannot be missed by a key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cuvil.errors import CuvilError

STRATEGIES = ("latency", "throughput")  # what extraction minimizes: cuvil/egraph/strategy.py


def check_strategy(name: object) -> str:
    """`name` if it is a strategy, else a one-line `CuvilError` naming the known ones."""
    if name not in STRATEGIES:
        raise CuvilError(f"unknown strategy {name!r}; known: {', '.join(STRATEGIES)}")
    return str(name)


@dataclass
class Limits:
    """Bounds that always hold. `time` bounds the whole optimization, in wall-clock seconds
    (a worker process is killed past it, keeping the best graph found so far)."""

    iterations: int = 64
    nodes: int = 50_000
    match_limit: int = 1_000
    ban_length: int = 2
    time: float = 10.0
    exact_nodes: int = 600  # extract exactly (ILP) up to this many e-nodes
    dag_nodes: int = 20_000  # DAG-aware greedy extraction up to this many, then tree costs
    exact_time: float = 2.0  # seconds the ILP may take

    def __post_init__(self):
        for name, value in vars(self).items():
            if not isinstance(value, int | float) or value <= 0:
                raise CuvilError(f"limit {name} must be a positive number, not {value!r}")


@dataclass(frozen=True, eq=False)
class CompileOptions:
    """What `cuvil.compile` and `cuvil.optimize` take besides the model (their docstrings
    say what each does). `extract`: "greedy", "exact" or "auto" (exact when small)."""

    rules: Any = None
    targets: tuple[str, ...] = ("cpu",)
    dynamic_shapes: Any = None
    fallback: bool = True
    threads: int | None = None
    limits: Limits = field(default_factory=Limits)
    disable: tuple[str, ...] = ()
    fuse_elementwise: bool = True
    quantize: Any = None
    fallback_policy: str | None = None  # None: the targets' own (`compile_targets.checked`)
    strategy: str = "latency"
    verify: bool = True
    extract: str = "auto"
    cache: bool = True
    trace: str | Path | None = None

    @classmethod
    def of(cls, *, target: str | Sequence[str] = "cpu", limits: Any = None,
           disable: Sequence[str] = (), strategy: str = "latency",
           **rest: Any) -> CompileOptions:
        """The options for a call's keyword arguments, each checked that needs no target
        registry: a one-line `CuvilError` for no target, an unknown limit or strategy
        (`compile_targets.checked` checks the targets' names)."""
        targets = (target,) if isinstance(target, str) else tuple(target)
        if not targets:
            raise CuvilError("at least one target is needed")
        return cls(targets=targets, limits=as_limits(limits), disable=tuple(disable),
                   strategy=check_strategy(strategy), **rest)

    def optimizer_key(self, hints: dict[str, int],
                      device_params: dict[str, dict[str, float]]) -> dict[str, Any]:
        """What the optimized graph depends on besides the graph and the rules: these
        options, `hints` (the symbolic dims' sizes) and each target's cost parameters in
        `device_params` (`compile_targets.device_costs`: what the optimizer prices with)."""
        targets = [(name, sorted(device_params[name].items()) if name in device_params
                    else None) for name in self.targets]
        return {"targets": targets, "limits": repr(self.limits),
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
