"""The e-graph optimizer: `.cvr` rules applied to Cuvil graphs by equality saturation.

One stage per module: `schema` (terms in egglog), `encode` (graph -> program), `rules`
and `guards` (checked rules -> egglog rules), `session` (stepping egglog), `typing` and
`fold` (analyses between steps), `saturate` (schedules and limits), `cost`, `extract`,
`decode`, `report`, `strategy` (latency or throughput); `optimizer` runs them in order
on a compile's `cuvil.options.CompileOptions`, `worker` isolates a run, `handoff` starts it
ahead of `torch.export`.

Names load on first use: unpickling a cached report must not import egglog and scipy.
"""

__all__ = ["Limits", "OptimizeReport", "OptimizerAhead", "cost_model", "optimize_ahead",
           "optimize_graph"]


def __getattr__(name: str):
    if name in ("optimize_graph", "cost_model"):  # egglog and scipy: ~2 s
        from cuvil.egraph import optimizer

        return getattr(optimizer, name)
    if name in ("OptimizerAhead", "optimize_ahead"):  # the IR (sympy): ~1 s, no egglog
        from cuvil.egraph import handoff

        return getattr(handoff, name)
    if name == "OptimizeReport":
        from cuvil.egraph.report import OptimizeReport

        return OptimizeReport
    if name == "Limits":
        from cuvil.options import Limits

        return Limits
    raise AttributeError(f"module 'cuvil.egraph' has no attribute {name!r}")
