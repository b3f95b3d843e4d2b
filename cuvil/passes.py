"""Named passes and the runner that enters each once, in order.

    passes = [Pass("import", import_, ImportCache()), Pass("calibrate", calibrate), ...]
    result = run(passes, first_value, tracer)

A pass is a function from one value to the next. A pass with a `Cache` is looked up by its
input first: a hit is the pass's output and the function is skipped; on a miss the
function runs and its output is offered to the cache. A pass's function may itself run a
list of passes (the import stage: export -> functionalize -> convert): a cache on it wraps
them all. The runner records each pass's time in the `Tracer` under the pass's name
(`Tracer.passes`), beside the finer stages the passes record themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cuvil.trace import Tracer


class Cache(Protocol):
    """A store of a pass's outputs, keyed by what its input is."""

    def lookup(self, value: Any) -> tuple[Any, Any | None]:
        """(the key of input `value`, the output stored under it or None); the key is
        None where the cache does not serve `value`."""

    def store(self, key: Any, value: Any, result: Any) -> None:
        """Keep `result`, the pass's output for input `value`, under `key` (where it may
        be kept)."""


@dataclass(frozen=True)
class Pass:
    """One named step of a pipeline: `function(value)` is the next value."""

    name: str
    function: Callable[[Any], Any]
    cache: Cache | None = None

    def __call__(self, value: Any) -> Any:
        key, found = (None, None) if self.cache is None else self.cache.lookup(value)
        if found is not None:
            return found
        result = self.function(value)
        if key is not None:
            self.cache.store(key, value, result)
        return result


def run(passes: Sequence[Pass], value: Any, tracer: Tracer) -> Any:
    """`value` through `passes`, each entered once, in order, timed under its name."""
    for step in passes:
        with tracer.span(step.name):
            value = step(value)
    return value
