"""A progress bar for long compiles: shown on a terminal once a compile has taken 1 s.

    tracer = Tracer()
    with compile_progress(tracer, "MLP"):
        ...                      # stages run under tracer.stage(...)

The bar follows the pipeline's stages (through `Tracer.listener`): importing, loading
rules, optimizing, lowering. It is `rich`'s, on stderr, transient (it disappears when the
compile ends), and never shown when stderr is not a terminal, for compiles shorter than
`delay`, or with `CUVIL_PROGRESS=0`.
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager

from cuvil.trace import Tracer

DELAY_S = 1.0  # compiles shorter than this show nothing
PHASES = ["importing", "loading rules", "optimizing", "lowering to kernels"]
# The phase a stage belongs to when it starts (and, for "check", the phase after it).
PHASE_OF_STAGE = {"import": 0, "cache lookup": 1, "parse": 1, "check": 1, "encode": 2,
                  "saturate": 2, "extract": 2, "decode": 2, "cache store": 2, "lower": 3}


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
        """`Tracer.listener`: move to the phase of `stage` (after "check": optimizing)."""
        phase = PHASE_OF_STAGE.get(stage, self.phase)
        if finished and stage == "check":
            phase = 2
        with self._lock:
            self.phase = max(self.phase, phase)
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
    """Whether to show progress on `stream`: a terminal, and not `CUVIL_PROGRESS=0`."""
    if os.environ.get("CUVIL_PROGRESS", "1") == "0":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


@contextmanager
def compile_progress(tracer: Tracer, name: str, stream=None, delay: float = DELAY_S):
    """Show a progress bar for the stages `tracer` records, if `wanted` and slow."""
    stream = stream if stream is not None else sys.stderr
    if not wanted(stream):
        yield None
        return
    progress = CompileProgress(name, stream, delay)
    tracer.listener = progress.on_stage
    progress.start()
    try:
        yield progress
    finally:
        tracer.listener = None
        progress.close()
