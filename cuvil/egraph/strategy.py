"""Extraction strategies: what "cheapest" means for a graph placed across devices.

`strategy=` of `cuvil.compile` and `cuvil.optimize` (the names: `cuvil.options.STRATEGIES`):

- `latency` (the default): the time of one call run alone. The runtime runs a call's steps
  one after another, the host waiting for the device at each boundary, so a call costs the
  sum of its nodes' costs (launches, kernels, transfers): the DAG cost every extractor
  minimizes.
- `throughput`: the time per call in a steady stream of calls whose steps overlap, the
  host, each device and the host link each busy with a different call at once (a serving
  pipeline, or several processes sharing one GPU). A call then costs the load of its
  busiest resource: the summed costs of the nodes each resource runs (a node runs on its
  device, a `to_device` between devices on the link), the total breaking ties. With one
  device the two strategies agree; across devices, throughput spreads the work.

Throughput is found by the exact extractor's minimax integer program; above
`limits.exact_nodes` e-nodes, or with `extract="greedy"`, the latency extraction is kept
and the report's notes say so. The notes give the chosen graph's load per resource.
"""

from __future__ import annotations

from cuvil.egraph.extract import Problem, Selection, exact, resource_loads
from cuvil.ir.types import TensorType

LINK = "link"  # the resource a transfer between devices keeps busy


def resource(op: str, ins: list[TensorType], out: TensorType) -> str:
    """What an e-node keeps busy: its device, or the link for a move between devices."""
    if op == "to_device" and ins and ins[0].device != out.device:
        return LINK
    return out.device


def busiest(selection: Selection, roots: list[str]) -> float:
    return max(resource_loads(selection.choice, roots).values(), default=0.0)


def select_throughput(prob: Problem, latency: Selection, size: int, extract: str,
                      exact_nodes: int, seconds: float) -> Selection:
    """The extraction whose busiest resource does least per call (see the docstring);
    `latency` is the latency strategy's extraction, kept when the ILP cannot run or loses."""
    if extract == "greedy" or size > exact_nodes:
        why = "extract='greedy'" if extract == "greedy" else f"{size} e-nodes > exact_nodes"
        latency.notes.append(f"throughput needs the exact extractor ({why}): "
                             "kept the latency extraction")
        return _with_loads(latency, prob.roots)
    ilp = exact(prob, seconds, minimax=True)
    if busiest(ilp, prob.roots) <= busiest(latency, prob.roots) + 1e-9:
        ilp.method += " (throughput)"
        return _with_loads(ilp, prob.roots)
    latency.notes.append("throughput: the ILP stopped above the latency extraction's load")
    return _with_loads(latency, prob.roots)


def _with_loads(selection: Selection, roots: list[str]) -> Selection:
    loads = sorted(resource_loads(selection.choice, roots).items(), key=lambda kv: -kv[1])
    text = ", ".join(f"{name} {load:.1f} us" for name, load in loads)
    selection.notes.append(f"throughput: load per call {text} (the busiest sets the rate)")
    return selection
