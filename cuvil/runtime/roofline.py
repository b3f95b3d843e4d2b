"""Each kernel's measured time beside the cost model's prediction and its roofline.

    prof = compiled.profile(inputs, runs=50)
    print(prof.kernel_table())

For every step of a profiled call: the measured mean, what the cost model predicted for
the nodes it computes (the figure extraction chose by), and the roofline, the time the
step would take at the target's peak rates (`gflops`, `gbps`): its catalog FLOPs over the
first, or the bytes it reads and writes over the second, whichever is longer. `% roof`
is roofline over measured (100% is the machine's limit); `x pred` is measured over
predicted (above 1 the cost model is optimistic about this kernel). Symbolic dims are
priced at the sizes of the profiled inputs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import sympy

from cuvil.ir.devices import HOST
from cuvil.ir.graph import Graph
from cuvil.lower.report import StepReport

LEAVES = ("input", "const", "scalar")


@dataclass(frozen=True)
class KernelRow:
    name: str
    template: str
    op: str
    measured_us: float
    predicted_us: float
    roofline_us: float
    flops: float
    bytes: float

    @property
    def gflops(self) -> float:
        return self.flops / (1e3 * self.measured_us) if self.measured_us else 0.0

    @property
    def gbps(self) -> float:
        return self.bytes / (1e3 * self.measured_us) if self.measured_us else 0.0


def symbol_sizes(graph: Graph, args: tuple) -> dict[str, int]:
    """The size each symbolic input dim has in `args` (the profiled call's inputs)."""
    sizes = {}
    for name, arg in zip(graph.inputs, args, strict=False):
        for d, n in zip(graph[name].type.shape, getattr(arg, "shape", ()), strict=False):
            if isinstance(d, sympy.Symbol):
                sizes[str(d)] = int(n)
    return sizes


def kernel_rows(steps: list[StepReport], means_us: list[float], graph: Graph, costs,
                sizes: dict[str, int]) -> list[KernelRow]:
    """One row per step, in call order; `graph` is the optimized graph (composite ops not
    yet inlined: priced as extraction priced them), `costs` the cost model."""
    costs = dataclasses.replace(costs, hints={**costs.hints, **sizes}, _memo={})
    return [_row(step, mean, graph, costs) for step, mean in zip(steps, means_us, strict=True)]


def _row(step: StepReport, mean: float, graph: Graph, costs) -> KernelRow:
    names = [n for n in (step.nodes or (step.node,)) if n in graph.nodes and
             graph[n].op not in LEAVES]
    inside = set(names)
    predicted = flops = 0.0
    reads: dict[str, float] = {}
    for name in names:
        node = graph[name]
        ins = [graph[i].type for i in node.inputs]
        predicted += costs.node_cost(node.op, node.attrs, ins, node.type)
        flops += costs.flops(node.op, node.attrs, ins, node.type)
        for i in node.inputs:
            if i not in inside and graph[i].op != "scalar" and i not in reads:
                reads[i] = costs.bytes(graph[i].type)
    out = graph[step.node].type if step.node in graph.nodes else None
    moved = sum(reads.values()) + (costs.bytes(out) if out is not None else 0.0)
    p = costs.params(out.device if out is not None else HOST)
    roof = max(flops / (1e3 * p["gflops"]), moved / (1e3 * p["gbps"]))
    return KernelRow(step.name, step.template, step.op, mean, predicted, roof, flops, moved)


def kernel_table(rows: list[KernelRow]) -> str:
    """The rows as an aligned table, with a total line."""
    head = ("kernel", "template", "op", "measured us", "predicted us", "x pred", "roofline us",
            "% roof", "GFLOP/s", "GB/s")
    cells = [(r.name, r.template, r.op, f"{r.measured_us:.1f}", f"{r.predicted_us:.1f}",
              _ratio(r.measured_us, r.predicted_us), f"{r.roofline_us:.1f}",
              _percent(r.roofline_us, r.measured_us), f"{r.gflops:.1f}", f"{r.gbps:.1f}")
             for r in rows]
    total = [sum(getattr(r, f) for r in rows) for f in ("measured_us", "predicted_us",
                                                         "roofline_us")]
    cells.append(("total", "", "", f"{total[0]:.1f}", f"{total[1]:.1f}",
                  _ratio(total[0], total[1]), f"{total[2]:.1f}", _percent(total[2], total[0]),
                  "", ""))
    widths = [max(len(c[i]) for c in (head, *cells)) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" if i < 3 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join(fmt.format(*c) for c in (head, *cells))


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def _percent(a: float, b: float) -> str:
    return f"{100 * a / b:.0f}%" if b else "-"
