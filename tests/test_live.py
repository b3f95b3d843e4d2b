"""tests/test_live.py: `cuvil.Watch` follows its rule files. An edit under a running watcher
is checked and the model recompiled with it (the next call runs the new program); a broken
edit keeps the old program and says where the file is wrong; a thread calling throughout
always gets eager's result (no half-built program)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import torch

import cuvil

FIRST = "ruleset mine\n# abs is idempotent\nrule mine_abs: abs(abs(x)) => abs(x)\n"
RENAMED = FIRST.replace("mine_abs", "mine_abs_again")
BROKEN = RENAMED.replace("=> abs(x)", "=> abs(y)")


class AbsTwice(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.abs(torch.abs(self.lin(x)))


def write(path: Path, text: str) -> None:
    """Atomically, as an editor saves: one change event."""
    part = path.with_suffix(".part")
    part.write_text(text)
    os.replace(part, path)


def fired(live, label: str) -> bool:
    stat = live.report.optimizer.rules.get(label)
    return stat is not None and stat.fired > 0


def until(condition, seconds: float = 120.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_an_edit_is_reloaded_and_a_broken_one_keeps_the_old_program(tmp_path):
    torch.manual_seed(0)
    mine = tmp_path / "my.cvr"
    write(mine, FIRST)
    model, x = AbsTwice().eval(), torch.randn(4, 8)
    with torch.no_grad():
        want = model(x)
    stop, wrong, calls = threading.Event(), [], [0]
    with cuvil.Watch(rules=["stock", str(mine)]) as watch:
        live = watch.compile(model, (x,))
        assert fired(live, "mine_abs")

        def call() -> None:
            while not stop.is_set():
                y = live(x)
                calls[0] += 1
                if not torch.allclose(y, want, atol=1e-6):
                    wrong.append(y)

        caller = threading.Thread(target=call)
        caller.start()
        try:
            write(mine, RENAMED)
            assert until(lambda: fired(live, "mine_abs_again")), watch.error
            assert watch.error is None
            before = live.current
            write(mine, BROKEN)
            assert until(lambda: watch.error is not None), "the broken edit is reported"
            assert watch.error.startswith(f"{mine}:3:"), watch.error
            assert live.current is before and fired(live, "mine_abs_again")
        finally:
            stop.set()
            caller.join()
    assert calls[0] > 0 and not wrong
    torch.testing.assert_close(live(x), want)
