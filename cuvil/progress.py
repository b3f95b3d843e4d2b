"""Progress of long compiles: once a compile has taken 1 s, a bar on a terminal and a
log line per stage.

    tracer = Tracer()
    with compile_progress(tracer, "MLP"):
        ...                      # stages run under tracer.stage(...)

Both follow the pipeline's stages (as `Tracer` listeners): importing, loading rules,
optimizing, lowering. The bar is `rich`'s, on stderr, transient (it disappears when the
compile ends), and never shown when stderr is not a terminal, for compiles shorter than
`delay`, or with `CUVIL_PROGRESS=0`. The log (`StageLog`) writes one INFO line through
the `cuvil` logger for each stage that starts after `delay`, terminal or not, whatever
`CUVIL_PROGRESS` says: CI logs show what a slow compile is doing, and logging's own
configuration (the `cuvil` logger's level) decides whether the lines are kept.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from contextlib import contextmanager

from cuvil.trace import Tracer

DELAY_S = 1.0  # compiles shorter than this show nothing
log = logging.getLogger("cuvil")
PHASES = ["importing", "loading rules", "optimizing", "lowering to kernels"]
# The phase a stage belongs to when it starts (and, for "check", the phase after it).
PHASE_OF_STAGE = {"import": 0, "cache lookup": 1, "parse": 1, "check": 1, "encode": 2,
                  "saturate": 2, "extract": 2, "decode": 2, "cache store": 2, "lower": 3}


def next_phase(phase: int, stage: str, finished: bool) -> int:
    """The phase a compile in `phase` is in once `stage` starts (or, `finished`, ends)."""
    new = 2 if finished and stage == "check" else PHASE_OF_STAGE.get(stage, phase)
    return max(phase, new)


class StageLog:
    """A `Tracer` listener: an INFO line on the `cuvil` logger for each stage that starts
    once the compile has taken `delay` seconds, naming the phase, the stage and the time
    so far (`cuvil: compiling MLP: optimizing (saturate, 1.2 s)`)."""

    def __init__(self, name: str, delay: float = DELAY_S, clock=time.perf_counter):
        self.name = name
        self.delay = delay
        self.clock = clock
        self.start = clock()
        self.phase = 0

    def on_stage(self, stage: str, finished: bool) -> None:
        self.phase = next_phase(self.phase, stage, finished)
        elapsed = self.clock() - self.start
        if finished or elapsed < self.delay:
            return
        log.info("cuvil: compiling %s: %s (%s, %.1f s)", self.name, PHASES[self.phase],
                 stage, elapsed)


class CompileProgress:
    """A rich progress bar started after `delay` seconds, moved along by stage events."""

    def __init__(self, name: str, stream=None, delay: float = DELAY_S):
        self.name = name
        self.stream = stream if stream is not None else sys.stderr
        self.delay = delay
        self.phase = 0
        self._bar = None
        self._task = None
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._closed = False

    def start(self) -> None:
        self._timer = threading.Timer(self.delay, self._show)
        self._timer.daemon = True
        self._timer.start()

    def on_stage(self, stage: str, finished: bool) -> None:
        """A `Tracer` listener: move to the phase of `stage` (after "check": optimizing)."""
        with self._lock:
            self.phase = next_phase(self.phase, stage, finished)
            self._update()

    def _show(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with self._lock:
            if self._closed:
                return
            console = Console(file=self.stream)
            self._bar = Progress(SpinnerColumn(), TextColumn(f"compiling {self.name}"),
                                 BarColumn(), TextColumn("{task.description}"),
                                 TimeElapsedColumn(), console=console, transient=True)
            self._task = self._bar.add_task(PHASES[self.phase], total=len(PHASES))
            self._update()
            self._bar.start()

    def _update(self) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=self.phase,
                             description=PHASES[self.phase])

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
            if self._bar is not None:
                self._bar.stop()


def display_name(model) -> str:
    """What the bar calls a model: a path as given, a graph's name, else its class."""
    if isinstance(model, str | os.PathLike):
        return os.fspath(model)
    return getattr(model, "name", None) or type(model).__name__


def wanted(stream) -> bool:
    """Whether to draw the bar on `stream`: a terminal, and not `CUVIL_PROGRESS=0` (which
    leaves the log lines alone)."""
    if os.environ.get("CUVIL_PROGRESS", "1") == "0":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


@contextmanager
def compile_progress(tracer: Tracer, name: str, stream=None, delay: float = DELAY_S):
    """Log the stages `tracer` records once the compile is slow, and show a progress bar
    for them too if `wanted`. Yields the bar's `CompileProgress`, or None without one."""
    stream = stream if stream is not None else sys.stderr
    stage_log = StageLog(name, delay)
    if not wanted(stream):
        with tracer.listening(stage_log.on_stage):
            yield None
        return
    progress = CompileProgress(name, stream, delay)
    with tracer.listening(stage_log.on_stage, progress.on_stage):
        progress.start()
        try:
            yield progress
        finally:
            progress.close()
