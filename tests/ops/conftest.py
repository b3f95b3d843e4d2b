"""The OpInfo sweep's pass/skip/rejected/fail counts per mode, printed after the run."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter):
    from opinfo_support import TALLY

    lines = TALLY.lines()
    if lines:
        terminalreporter.section("OpInfo samples (tests/ops/test_opinfo.py)")
        for line in lines:
            terminalreporter.write_line(line)
