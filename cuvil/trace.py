"""Stage timings as Chrome-trace JSON (open the file in Perfetto or chrome://tracing).

    tracer = Tracer()
    with tracer.stage("parse"):
        ...
    tracer.write("passes.json")

A pipeline's passes (`cuvil/passes.py`) are recorded as spans (`Tracer.span`): their
seconds in `passes`, in the order they ran, apart from the stages' `totals`, and an event
enclosing the stages each ran.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuvil.atomic import write_text


@dataclass
class Tracer:
    events: list[dict[str, Any]] = field(default_factory=list)
    totals: dict[str, float] = field(default_factory=dict)  # stage -> seconds
    passes: dict[str, float] = field(default_factory=dict)  # pass -> seconds, in run order
    origin: float = field(default_factory=time.perf_counter)
    steps: int = 0
    # each `listener(stage, finished)` is called at each stage's start and end
    listeners: list[Callable[[str, bool], None]] = field(default_factory=list)

    def _event(self, name: str, start: float, seconds: float, **args: Any) -> None:
        self.events.append({"name": name, "ph": "X", "pid": os.getpid(), "tid": 0,
                            "ts": round((start - self.origin) * 1e6, 1),
                            "dur": round(seconds * 1e6, 1), "args": args})

    @contextmanager
    def listening(self, *listeners: Callable[[str, bool], None]):
        """Call `listeners` at each stage's start and end while the block runs."""
        self.listeners.extend(listeners)
        try:
            yield
        finally:
            for listener in listeners:
                self.listeners.remove(listener)

    def _tell(self, name: str, finished: bool) -> None:
        for listener in list(self.listeners):
            listener(name, finished)

    @contextmanager
    def stage(self, name: str, **args: Any):
        self._tell(name, False)
        start = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - start
            self.totals[name] = self.totals.get(name, 0.0) + seconds
            self._event(name, start, seconds, **args)
            self._tell(name, True)

    @contextmanager
    def span(self, name: str):
        """Time a pass: no listener hears it (progress follows the stages within). A pass
        is listed in `passes` when it starts: a pass that runs passes comes before them."""
        self.passes.setdefault(name, 0.0)
        start = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - start
            self.passes[name] = self.passes.get(name, 0.0) + seconds
            self._event(name, start, seconds, kind="pass")

    def add(self, name: str, start: float, seconds: float, **args: Any) -> None:
        """Record a stage that has finished already: one whose name its outcome decides
        (`import (cached)` or `import key`)."""
        self.totals[name] = self.totals.get(name, 0.0) + seconds
        self._event(name, start, seconds, **args)

    def step(self, result: Any) -> None:
        """Record one saturation iteration (a `StepResult`) as it finishes."""
        self.steps += 1
        end = time.perf_counter()
        self._event(f"iteration {self.steps}", end - result.seconds, result.seconds,
                    rulesets=list(result.rulesets), enodes=result.size,
                    matches=sum(result.matches.values()))

    def to_json(self) -> str:
        return chrome_trace(self.events)

    def write(self, path: str | Path) -> None:
        write_text(path, self.to_json())


def chrome_trace(events: list[dict[str, Any]]) -> str:
    """Trace events as a Chrome-trace JSON document (Perfetto, chrome://tracing)."""
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}, indent=1)
