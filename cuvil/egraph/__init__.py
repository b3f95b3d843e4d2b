"""The e-graph optimizer: `.cvr` rules applied to Cuvil graphs by equality saturation.

One stage per module: `schema` (terms in egglog), `encode` (graph -> program), `rules`
and `guards` (checked rules -> egglog rules), `session` (stepping egglog), `typing` and
`fold` (analyses between steps), `saturate` (schedules and limits), `cost`, `extract`,
`decode`, `report`, `strategy` (latency or throughput); `optimizer` runs them in order
on `options`, `worker` isolates a run, `handoff` starts it ahead of `torch.export`.

Names load on first use: unpickling a cached report must not import egglog and scipy.
"""

import importlib

_LAZY = {"Options": "options", "optimize_graph": "optimizer", "OptimizeReport": "report",
         "Limits": "limits"}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'cuvil.egraph' has no attribute {name!r}")
    return getattr(importlib.import_module(f"cuvil.egraph.{_LAZY[name]}"), name)
