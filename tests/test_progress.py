"""The compile progress bar: drawn on a terminal once a compile is slow, through the
stages the tracer records; nothing at all when stderr is not a terminal, for a fast
compile, or with CUVIL_PROGRESS=0."""

from __future__ import annotations

import io
import time

import pytest

from cuvil.progress import CompileProgress, compile_progress, display_name, wanted
from cuvil.trace import Tracer


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def run_stages(tracer: Tracer, *names: str) -> None:
    for name in names:
        with tracer.stage(name):
            pass


def wait_shown(progress: CompileProgress) -> None:
    deadline = time.monotonic() + 30
    while progress._bar is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert progress._bar is not None


def test_a_slow_compile_on_a_terminal_shows_the_stages():
    stream, tracer = Terminal(), Tracer()
    with compile_progress(tracer, "MLP", stream=stream, delay=0.0) as progress:
        wait_shown(progress)
        run_stages(tracer, "import", "parse", "check")
        assert progress.phase == 2  # after the rules are checked: optimizing
        run_stages(tracer, "lower")
        assert progress.phase == 3
    assert tracer.listener is None
    shown = stream.getvalue()
    assert "compiling MLP" in shown
    assert {e["name"] for e in tracer.events} == {"import", "parse", "check", "lower"}


def test_a_fast_compile_shows_nothing():
    stream, tracer = Terminal(), Tracer()
    with compile_progress(tracer, "MLP", stream=stream, delay=60.0):
        run_stages(tracer, "import", "lower")
    assert stream.getvalue() == ""


def test_quiet_when_not_a_terminal_or_turned_off(monkeypatch):
    stream, tracer = io.StringIO(), Tracer()
    with compile_progress(tracer, "MLP", stream=stream, delay=0.0) as progress:
        assert progress is None and tracer.listener is None
        run_stages(tracer, "import")
    assert stream.getvalue() == ""
    assert wanted(Terminal())
    monkeypatch.setenv("CUVIL_PROGRESS", "0")
    assert not wanted(Terminal())


@pytest.mark.parametrize(("model", "name"), [("model.pt2", "model.pt2"),
                                             (Tracer(), "Tracer")])
def test_display_name(model, name):
    assert display_name(model) == name
