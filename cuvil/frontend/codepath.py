"""The way a model's own Python code goes while something traces it: which of its functions
start, which way each of their branches goes, what they yield and which exceptions they
catch, recorded with `sys.monitoring` (Python 3.12+).

    with CodePath(forward_functions) as path:
        torch.fx.symbolic_trace(model)
    path.signature()     # [[code names], [(code index, kind, offset, destination), ...]]

The import cache (`cuvil/cache/imports.py`) keys on a symbolic trace, whose proxies are not
tensors: code that asks `isinstance(x, torch.Tensor)`, catches a tracing error or checks a
tracing flag goes one way under torch.fx and another under torch.export. Such code shows
here: the key holds the path the symbolic trace took, and an entry is stored only when
export's run of the model took the same path.

The model's own code is every function of the modules (files) its `forward`s are defined
in, lambdas and comprehensions included, and every function such code calls that is
neither torch's, Cuvil's nor the standard library's (a helper in another file, a library
such as einops). Only that code is instrumented (local events), so torch's code runs at
full speed; only the recording thread's events count.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import types
from collections.abc import Iterable
from types import CodeType
from typing import Any

import torch

from cuvil.paths import PACKAGE

MON = sys.monitoring
NAME = "cuvil codepath"
TOOLS = (4, 3)  # ids no standard tool claims (0 debugger, 1 coverage, 2 profiler, 5 optimizer)
_LIBRARIES = (os.path.dirname(torch.__file__) + os.sep, str(PACKAGE) + os.sep,
              sysconfig.get_paths()["stdlib"] + os.sep)
_ZOO = str(PACKAGE / "zoo") + os.sep  # Cuvil's model zoo is models, not Cuvil
_LOCAL = MON.events.PY_START | MON.events.BRANCH | MON.events.PY_YIELD | MON.events.CALL
_lock = threading.Lock()  # one recording at a time: the tool's callbacks are process-wide


class Unavailable(Exception):
    """The recorder cannot run: no `sys.monitoring` tool id is free, or another thread
    records."""


def _claim() -> int:
    """A free tool id, claimed for one recording (freed after it)."""
    for tool in TOOLS:
        if MON.get_tool(tool) is None:
            MON.use_tool_id(tool, NAME)
            return tool
    raise Unavailable(f"sys.monitoring tool ids {TOOLS} are taken")


def library(file: str) -> bool:
    """Whether `file` is torch's, Cuvil's or the standard library's (never the model's); the
    standard library's frozen modules (`<frozen _collections_abc>`) included."""
    return file.startswith(_LIBRARIES + ("<frozen ",)) and not file.startswith(_ZOO)


def own_code(functions: Iterable[types.FunctionType]) -> set[CodeType]:
    """Every code object of the modules `functions` are defined in (functions, methods,
    properties, and the lambdas and comprehensions inside them)."""
    found: set[CodeType] = set()
    for fn in functions:
        namespace = fn.__globals__
        for value in list(namespace.values()):
            for code in _codes_of(value, namespace.get("__name__")):
                _nested(code, found)
        _nested(fn.__code__, found)
    return {code for code in found if not library(code.co_filename)}


def _codes_of(value: Any, module: str | None) -> Iterable[CodeType]:
    if isinstance(value, types.FunctionType) and value.__module__ == module:
        yield value.__code__
    elif isinstance(value, type) and value.__module__ == module:
        for member in vars(value).values():
            for fn in (getattr(member, "__func__", member), getattr(member, "fget", None),
                       getattr(member, "fset", None)):
                if isinstance(fn, types.FunctionType):
                    yield fn.__code__


def _nested(code: CodeType, found: set[CodeType]) -> None:
    if code not in found:
        found.add(code)
        for const in code.co_consts:
            if isinstance(const, CodeType):
                _nested(const, found)


class CodePath:
    """Records the path of the code in `watched` (and what it calls) while in the block."""

    def __init__(self, watched: set[CodeType]):
        self.initial = frozenset(watched)
        self.watched: set[CodeType] = set()
        self.codes: list[CodeType] = []  # in the order first seen: events name them by index
        self.index: dict[CodeType, int] = {}
        self.events: list[tuple[int, str, int, int]] = []
        self.thread = threading.get_ident()
        self.tool = -1

    def __enter__(self) -> CodePath:
        if not _lock.acquire(blocking=False):
            raise Unavailable("another thread records a code path")
        try:
            self.tool = _claim()
            for event, callback in self._callbacks():
                MON.register_callback(self.tool, event, callback)
            for code in self.initial:
                self._watch(code)
            MON.set_events(self.tool, MON.events.EXCEPTION_HANDLED)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.tool >= 0:
                MON.set_events(self.tool, 0)
                for code in self.watched:
                    MON.set_local_events(self.tool, code, 0)
                for event, _ in self._callbacks():
                    MON.register_callback(self.tool, event, None)
                MON.free_tool_id(self.tool)
        finally:
            _lock.release()

    def _callbacks(self):
        return ((MON.events.PY_START, self._start), (MON.events.BRANCH, self._branch),
                (MON.events.PY_YIELD, self._yield), (MON.events.CALL, self._call),
                (MON.events.EXCEPTION_HANDLED, self._caught))

    def _watch(self, code: CodeType) -> None:
        self.watched.add(code)
        MON.set_local_events(self.tool, code, _LOCAL)

    def signature(self) -> list[Any]:
        """The path as plain data: each code by name and first line, then the events."""
        return [[[c.co_qualname, c.co_firstlineno] for c in self.codes], self.events]

    def _record(self, code: CodeType, kind: str, offset: int, to: int = 0) -> None:
        if threading.get_ident() != self.thread:
            return
        if code not in self.index:
            self.index[code] = len(self.codes)
            self.codes.append(code)
        self.events.append((self.index[code], kind, offset, to))

    # -- callbacks ---------------------------------------------------------------------------
    def _start(self, code: CodeType, offset: int) -> None:
        self._record(code, "start", offset)

    def _branch(self, code: CodeType, offset: int, destination: int) -> None:
        self._record(code, "branch", offset, destination)

    def _yield(self, code: CodeType, offset: int, value: Any) -> None:
        self._record(code, "yield", offset)

    def _caught(self, code: CodeType, offset: int, exception: BaseException) -> None:
        if code in self.watched:
            self._record(code, "caught", offset)

    def _call(self, code: CodeType, offset: int, target: Any, arg0: Any) -> None:
        """A call in the model's code: watch the callee too, unless it is a library's."""
        fn = getattr(target, "__func__", target)
        callee = getattr(fn, "__code__", None) if isinstance(fn, types.FunctionType) else None
        if callee is not None and callee not in self.watched and \
                threading.get_ident() == self.thread and not library(callee.co_filename):
            self._watch(callee)


def repeats(path: CodePath, once: CodePath) -> bool:
    """Whether `path` is `once`'s path, taken one or more times over (export may run a
    model's code again, for a static retry)."""
    if path.codes != once.codes:
        return False
    n = len(once.events)
    if n == 0:
        return not path.events
    times, rest = divmod(len(path.events), n)
    return times >= 1 and rest == 0 and path.events == once.events * times
