"""`lower`: an (optimized) Cuvil graph -> `Lowering`, the one value the runtime builds from.

    lowering = lower(graph, target="cpu", threads=None, sizes=hints)
    compiled = build_program(lowering)                 # runtime/build.py

A `Lowering` is the generated program (`lower.codegen.Program`: the kernel modules' and the
entry's text, the steps, the arrays) with what lowering made it from: the prepared graph
(`lower.compile.prepare`), the lowering context, the groups, the targets and the thread
count. `split(failed)` is the same lowering with groups that Numba rejected regenerated
apart (runtime/build.py says why).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from cuvil.ir import devices
from cuvil.ir.graph import Graph
from cuvil.lower.codegen import Program
from cuvil.lower.compile import generate, prepare
from cuvil.lower.context import LowerContext
from cuvil.lower.devices import Targets
from cuvil.runtime.threads import choose_layer, thread_count


@dataclass(frozen=True)
class Lowering:
    """A graph's generated program and what building a callable of it needs."""

    graph: Graph  # the graph lowered, as given (its report, its steps' sources)
    prepared: Graph  # composites inlined, layouts explicit: what the program computes
    instances: dict[str, Any]  # the inlined composite instances, by name
    targets: Targets
    threads: int
    fuse_elementwise: bool
    fallback: bool
    sizes: dict[str, int]  # the symbolic dims' example sizes (the memory plan's report)
    program: Program
    ctx: LowerContext
    groups: list
    started: float  # `time.perf_counter()` when lowering began
    lower_s: float  # seconds from `started` to this program's text
    forced: dict[str, str] = field(default_factory=dict)  # node -> "split" or a reason

    def split(self, failed: list[tuple[Any, str]]) -> Lowering:
        """This lowering again with each (group, reason) of `failed` forced apart: a group
        of several nodes split into its nodes, a lone node run by its fallback."""
        forced = dict(self.forced)
        for group, reason in failed:
            for n in group.nodes:
                forced[n] = "split" if len(group.nodes) > 1 else reason
        return _generated(replace(self, forced=forced))


def lower(graph: Graph, *, target="cpu", fallback: bool = True, threads: int | None = None,
          fuse_elementwise: bool = True, fallback_policy: str = "cpu",
          sizes: dict[str, int] | None = None) -> Lowering:
    """`graph` lowered for `target` (a name, a `Target`, or several: each node is lowered
    by the target of its device). `sizes`: the symbolic dims' sizes in the example inputs,
    at which the report sizes the memory plan."""
    started = time.perf_counter()
    targets = Targets(target, fallback_policy)
    choose_layer()
    for device in sorted(targets.by_device):
        devices.device(device).prepare()  # the CPU's: BLAS single-threaded
    prepared, instances = prepare(graph)
    _devices_available(prepared)
    return _generated(Lowering(graph, prepared, instances, targets, thread_count(threads),
                               fuse_elementwise, fallback, sizes or {}, None, None, [],
                               started, 0.0))


def _generated(lowering: Lowering) -> Lowering:
    """`lowering` with its program generated (for its forced groups)."""
    program, ctx, groups = generate(lowering.prepared, lowering.instances, lowering.targets,
                                    lowering.threads, lowering.fuse_elementwise,
                                    lowering.forced, lowering.fallback)
    return replace(lowering, program=program, ctx=ctx, groups=groups,
                   lower_s=time.perf_counter() - lowering.started)


def _devices_available(g: Graph) -> None:
    """Each device the graph's values are on is there (a GPU, or Numba's CUDA simulator):
    its target's `require` hook raises otherwise."""
    for name in sorted({node.type.device for node in g}):
        devices.device(name).require()
