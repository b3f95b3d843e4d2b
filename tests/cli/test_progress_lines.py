"""Off a terminal, a command's compile says what it is doing on stderr through the `cuvil`
logger (`cli.progress_lines`); on a terminal the progress bar does, and a caller's own
logging configuration is left alone."""

from __future__ import annotations

import io
import logging

from cuvil.cli import progress_lines
from cuvil.progress import StageLog

log = logging.getLogger("cuvil")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def stages(name: str) -> None:
    """A compile's stage events, one second apart from its start, as `StageLog` hears them."""
    clock = iter(float(t) for t in range(10)).__next__
    listener = StageLog(name, delay=1.0, clock=clock)
    for stage in ("import", "encode", "lower"):
        listener.on_stage(stage, False)


def test_off_a_terminal_each_late_stage_is_a_line_on_stderr():
    out = io.StringIO()
    with progress_lines(out):
        stages("MLP")
    assert out.getvalue().splitlines() == [
        "cuvil: compiling MLP: importing (import, 1.0 s)",
        "cuvil: compiling MLP: optimizing (encode, 2.0 s)",
        "cuvil: compiling MLP: lowering to kernels (lower, 3.0 s)"]
    assert not log.handlers and log.level == logging.NOTSET  # the logger as it was


def test_a_terminal_gets_the_bar_not_lines():
    out = Terminal()
    with progress_lines(out):
        assert not log.handlers
        stages("MLP")
    assert out.getvalue() == ""


def test_a_callers_handler_wins():
    mine = io.StringIO()
    handler = logging.StreamHandler(mine)
    log.addHandler(handler)
    try:
        out = io.StringIO()
        with progress_lines(out):
            assert log.handlers == [handler]
    finally:
        log.removeHandler(handler)
    assert out.getvalue() == ""
