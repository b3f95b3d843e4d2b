"""The optimizer's limits and extraction strategies: plain data, importable without egglog
or scipy (a cache key holds them)."""

from __future__ import annotations

from dataclasses import dataclass

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
