"""Rules reloaded live: compiled models that follow their rule files as they are edited.

    watch = cuvil.Watch(rules=["stock", "my_rules.cvr"])
    fast = watch.compile(model, inputs)      # a callable, as `cuvil.compile` returns
    ...                                       # my_rules.cvr edited: the next calls run
    watch.close()                             # the program of the new rules

A thread waits on the rule files' folders (watchfiles: the OS's file events, debounced).
When a `.cvr` file there changes, it checks and verifies the new library as a compile does
(`pipeline.check_rules`), then compiles every model compiled under the watch again with it
(the caches serve what the rules did not change) and swaps each in: one reference,
replaced, so a call in flight finishes on the old program and the next runs on the new;
no call sees a half-built one. A library that fails to check, or a model that fails to
compile, leaves the old programs in force; the error (`file:line:col` for a rule file)
is logged and kept in `watch.error`. `watch.wait()` blocks until the next reload is done.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cuvil.errors import CuvilError

log = logging.getLogger("cuvil.live")


class LiveModel:
    """A compiled model that a `Watch` recompiles when its rules change: call it as the
    compiled model (`current`)."""

    def __init__(self, compiled, model: Any, example_inputs: Any, options: dict[str, Any]):
        self.current = compiled
        self._model, self._inputs, self._options = model, example_inputs, options

    def __call__(self, *inputs: Any) -> Any:
        return self.current(*inputs)

    @property
    def report(self):
        return self.current.report

    def recompiled(self):
        from cuvil.pipeline import compile as cuvil_compile

        return cuvil_compile(self._model, self._inputs, **self._options)


class Watch:
    """Models compiled with `rules`, recompiled when those files change (see the module
    docstring). Use as a context manager, or call `close`."""

    def __init__(self, rules: Any, *, debounce_ms: int = 200):
        self.rules = rules
        self.error: str | None = None
        self.reloads = 0  # reloads done, the failed ones included
        self._models: list[LiveModel] = []
        self._done = threading.Condition()
        self._stop = threading.Event()
        folders = sorted({str(p) for p in _folders(rules)})
        if not folders:
            raise CuvilError("cuvil.Watch: no rule file or folder to watch (the stock "
                             "library alone does not change)")
        self._thread = threading.Thread(target=self._run, args=(folders, debounce_ms),
                                        name="cuvil-watch", daemon=True)
        self._thread.start()

    def compile(self, model: Any, example_inputs: Any = None, **options: Any) -> LiveModel:
        """`cuvil.compile(model, example_inputs, rules=self.rules, **options)`, followed."""
        from cuvil.pipeline import compile as cuvil_compile

        options = {**options, "rules": self.rules}
        live = LiveModel(cuvil_compile(model, example_inputs, **options), model,
                         example_inputs, options)
        self._models.append(live)
        return live

    def wait(self, timeout: float | None = None, after: int | None = None) -> bool:
        """Block until reload number `after` + 1 is done (`after`: `reloads` now, by
        default); whether it was, within `timeout` seconds."""
        with self._done:
            seen = self.reloads if after is None else after
            return self._done.wait_for(lambda: self.reloads > seen, timeout)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, folders: list[str], debounce_ms: int) -> None:
        import watchfiles

        for changes in watchfiles.watch(*folders, stop_event=self._stop, debounce=debounce_ms,
                                        watch_filter=_rule_files, raise_interrupt=False):
            log.info("rule files changed: %s", ", ".join(sorted({p for _, p in changes})))
            self.reload()

    def reload(self) -> None:
        """Check the rules, recompile every model with them and swap each in; on an error,
        keep the old programs and say why."""
        from cuvil.verify.gate import check_rules

        try:
            check_rules(self.rules)  # a model compiled later reads them too
            fresh = [(live, live.recompiled()) for live in list(self._models)]
        except CuvilError as e:
            self.error = str(e).splitlines()[0]
            log.error("rules not reloaded, the old programs stay: %s", self.error)
        else:
            for live, compiled in fresh:
                live.current = compiled
            self.error = None
        with self._done:
            self.reloads += 1
            self._done.notify_all()


def _folders(rules: Any) -> list[Path]:
    """The folders holding the rule files `rules` names (what `include` lines name lies
    beside them, or under them)."""
    if isinstance(rules, Sequence) and not isinstance(rules, str):
        return [f for r in rules for f in _folders(r)]
    if rules is None or rules == "stock" or (isinstance(rules, str) and "\n" in rules):
        return []
    path = Path(rules).resolve()
    return [path if path.is_dir() else path.parent]


def _rule_files(change: Any, path: str) -> bool:
    return path.endswith(".cvr")
