"""The e-graph optimizer: `.cvr` rules applied to Cuvil graphs by equality saturation.

One stage per module: `schema` (terms in egglog), `encode` (graph -> program), `rules`
and `guards` (checked rules -> egglog rules), `session` (stepping egglog), `typing` and
`fold` (analyses between steps), `saturate` (schedules and limits), `cost`, `extract`,
`decode`, `report`; `optimizer` runs them in order, `worker` isolates a run.
"""

from cuvil.egraph.optimizer import Options, optimize_graph
from cuvil.egraph.report import OptimizeReport
from cuvil.egraph.session import Limits

__all__ = ["Limits", "OptimizeReport", "Options", "optimize_graph"]
