"""What the optimizer is asked for besides the graph and the rules (`Options`): a module of
its own, so that the compiling process can build it without importing egglog."""

from __future__ import annotations

from dataclasses import dataclass, field

from cuvil.egraph.limits import Limits


@dataclass
class Options:
    targets: tuple[str, ...] = ("cpu",)
    limits: Limits = field(default_factory=Limits)
    extract: str = "auto"  # "greedy", "exact" or "auto" (exact when small)
    fold: bool = True
    hints: dict | None = None  # symbol -> size the cost model assumes
    isolate: bool = True  # saturate in a forked worker that the deadline can kill
    device_params: dict | None = None  # target name -> cost parameters (registered targets)
    strategy: str = "latency"  # or "throughput" (cuvil/egraph/strategy.py)
    placed_on: str = ""  # the device the whole graph was placed on before (`ir/place.py`)
