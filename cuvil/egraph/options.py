"""What the optimizer is asked for besides the graph and the rules (`Options`): a module of
its own, so that the compiling process can build it without importing egglog.

`Options` is the optimizer's own narrow view of a compile's `cuvil.options.CompileOptions`
(`CompileOptions.optimizer(hints)` makes it): the egraph layer sits below `options` and may
not import it, the value is pickled to the optimizer's child process with each graph, and
it holds what only the optimizer reads (the hints, the targets' cost parameters, `fold`,
`isolate`) without the lowering's and the caches' fields."""

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
