"""The fuzzer's modules import each other by name (this folder on the path, as pytest's
rootdir import puts it for the tests), and its tally: how many models passed, were
refused (by reason) or failed, printed at the end of a run that ran them."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def pytest_terminal_summary(terminalreporter):
    outcomes, refusals = Counter(), Counter()
    for reports in terminalreporter.stats.values():
        for report in reports:
            props = dict(getattr(report, "user_properties", ()))
            if getattr(report, "when", "") == "call" and "fuzz_outcome" in props:
                outcomes[props["fuzz_outcome"]] += 1
                if "fuzz_refusal" in props:
                    refusals[props["fuzz_refusal"]] += 1
    if not outcomes:
        return
    terminalreporter.section("cuvil fuzz")
    terminalreporter.write_line(", ".join(f"{n} {kind}" for kind, n in outcomes.most_common()))
    for reason, n in refusals.most_common():
        terminalreporter.write_line(f"  refused {n}x: {reason}")
