"""Compile progress: once a compile is slow, a bar drawn on a terminal and a log line for
each stage the tracer records from then on; no bar when stderr is not a terminal or with
CUVIL_PROGRESS=0 (the log lines stay), nothing at all for a fast compile."""

from __future__ import annotations

import io
import logging
import time

import pytest

from cuvil.progress import CompileProgress, StageLog, compile_progress, display_name, wanted
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
    assert tracer.listeners == []
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
        assert progress is None and len(tracer.listeners) == 1  # the log's
        run_stages(tracer, "import")
    assert stream.getvalue() == ""
    assert wanted(Terminal())
    monkeypatch.setenv("CUVIL_PROGRESS", "0")
    assert not wanted(Terminal())


@pytest.mark.parametrize(("model", "name"), [("model.pt2", "model.pt2"),
                                             (Tracer(), "Tracer")])
def test_display_name(model, name):
    assert display_name(model) == name


def log_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "cuvil"]


def test_a_slow_compile_logs_each_stage_that_starts_after_the_delay(caplog):
    now = [0.0]
    stage_log, tracer = StageLog("MLP", delay=1.0, clock=lambda: now[0]), Tracer()
    caplog.set_level(logging.INFO, logger="cuvil")
    with tracer.listening(stage_log.on_stage):
        run_stages(tracer, "import", "parse")
        now[0] = 1.25
        run_stages(tracer, "check", "saturate", "lower")
    assert log_lines(caplog) == ["cuvil: compiling MLP: loading rules (check, 1.2 s)",
                                 "cuvil: compiling MLP: optimizing (saturate, 1.2 s)",
                                 "cuvil: compiling MLP: lowering to kernels (lower, 1.2 s)"]
    assert all(r.levelno == logging.INFO for r in caplog.records)


@pytest.mark.parametrize(("stream", "quiet"), [(io.StringIO(), False), (Terminal(), True)])
def test_the_log_lines_need_no_terminal_nor_the_bar(monkeypatch, caplog, stream, quiet):
    if quiet:
        monkeypatch.setenv("CUVIL_PROGRESS", "0")
    tracer = Tracer()
    caplog.set_level(logging.INFO, logger="cuvil")
    with compile_progress(tracer, "MLP", stream=stream, delay=0.0) as progress:
        assert progress is None
        run_stages(tracer, "import", "lower")
    assert stream.getvalue() == ""
    lines = log_lines(caplog)
    assert [line.split(" (")[0] for line in lines] == ["cuvil: compiling MLP: importing",
                                                      "cuvil: compiling MLP: lowering to kernels"]
    assert tracer.listeners == []


def test_a_fast_compile_logs_nothing(caplog):
    tracer = Tracer()
    caplog.set_level(logging.INFO, logger="cuvil")
    with compile_progress(tracer, "MLP", stream=Terminal(), delay=60.0):
        run_stages(tracer, "import", "lower")
    assert log_lines(caplog) == []


def test_the_bar_and_the_log_both_follow_the_stages(caplog):
    stream, tracer = Terminal(), Tracer()
    caplog.set_level(logging.INFO, logger="cuvil")
    with compile_progress(tracer, "MLP", stream=stream, delay=0.0) as progress:
        wait_shown(progress)
        run_stages(tracer, "import", "saturate")
        assert progress.phase == 2
    assert "compiling MLP" in stream.getvalue()
    assert len(log_lines(caplog)) == 2
