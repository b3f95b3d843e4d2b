"""Where Numba's compile time goes, phase by phase, and how much of its LLVM work is spent
on code linked in from callees.

`instrument()` wraps Numba's compiler and code library so that each phase's time is
recorded exclusively (a callee compiled inside its caller's typing counts once, as its
own phases): typing and lowering, LLVM function passes, linking, module passes, machine
code emission, on-disk cache loads and saves. Each finalized library records the LLVM
instructions of its own module and of the modules linked into it (Numba's runtime, NRT,
apart), and, with `own_only=True`, the time that the module passes and emission take on
its own module alone (callees left as declarations): the cost a call without linking
would leave. The measuring itself is timed apart and left out of every phase.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field

from numba.core import caching, codegen, dispatcher
from numba.core.runtime import nrt


@dataclass
class Library:
    """One finalized code library: sizes in LLVM instructions and its LLVM seconds."""

    name: str
    own: int = 0
    linked: int = 0
    nrt: int = 0
    after: int = 0
    module_s: float = 0.0
    emit_s: float = 0.0
    own_only_s: float = 0.0


@dataclass
class Phases:
    """Exclusive seconds per phase, calls per phase, and the libraries finalized."""

    seconds: dict = field(default_factory=lambda: defaultdict(float))
    calls: dict = field(default_factory=lambda: defaultdict(int))
    libraries: list = field(default_factory=list)
    linked_copies: dict = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    _stack: list = field(default_factory=list)

    @contextmanager
    def phase(self, name: str):
        frame = [name, time.perf_counter(), 0.0]
        self._stack.append(frame)
        try:
            yield
        finally:
            spent = time.perf_counter() - frame[1]
            self._stack.pop()
            self.seconds[name] += spent - frame[2]
            self.calls[name] += 1
            if self._stack:
                self._stack[-1][2] += spent

    def inside(self, name: str) -> bool:
        return any(frame[0] == name for frame in self._stack)


def instructions(module) -> int:
    return sum(1 for fn in module.functions for block in fn.blocks
               for _ in block.instructions)


def _wrap(cls, attr: str, phases: Phases, name) -> None:
    original = getattr(cls, attr)

    def timed(self, *args, **kwargs):
        with phases.phase(name(phases) if callable(name) else name):
            return original(self, *args, **kwargs)

    setattr(cls, attr, timed)


def _optimize_and_emit(lib, module) -> float:
    """Seconds of the module passes and object emission of `module`, as `lib` runs them."""
    cg = lib._codegen
    t0 = time.perf_counter()
    module.data_layout = cg._data_layout
    cheap, cheap_pb = cg._module_pass_manager(loop_vectorize=cg._loopvect,
                                              slp_vectorize=False, opt=cg._opt_level,
                                              cost="cheap")
    cheap.run(module, cheap_pb)
    full, full_pb = cg._module_pass_manager()
    full.run(module, full_pb)
    cg._tm.emit_object(module)
    return time.perf_counter() - t0


def _finalize_measured(phases: Phases, own_only: bool):
    original = codegen.CPUCodeLibrary.finalize

    def finalize(self):
        with phases.phase("measuring (left out)"):
            rec = Library(self.name, own=instructions(self._final_module))
            runtime = nrt.rtsys.library if nrt.rtsys._init else None
            for lib in dict.fromkeys(self._linking_libraries):
                count = instructions(lib._get_module_for_linking())
                if lib is runtime:
                    rec.nrt += count
                else:
                    rec.linked += count
                    copies = phases.linked_copies[lib.name]
                    copies[0] += 1
                    copies[1] += count
            alone = self._final_module.clone() if own_only and rec.linked else None
        phases.libraries.append(rec)
        with phases.phase("link + verify"):
            original(self)
        with phases.phase("measuring (left out)"):
            rec.after = instructions(self._final_module)
            if alone is not None:
                rec.own_only_s = _optimize_and_emit(self, alone)
            else:
                rec.own_only_s = rec.module_s + rec.emit_s

    return finalize


def instrument(own_only: bool = False) -> Phases:
    """Wrap Numba's compile phases; returns the `Phases` they record into."""
    phases = Phases()
    _wrap(dispatcher._FunctionCompiler, "_compile_core", phases, "typing + lowering")
    _wrap(codegen.CPUCodeLibrary, "_optimize_functions", phases, "LLVM function passes")
    _wrap(caching.Cache, "_load_overload", phases, "cache load")
    _wrap(caching.Cache, "save_overload", phases, "cache save")
    _record_into_library(codegen.CPUCodeLibrary, "_optimize_final_module", phases,
                         "LLVM module passes", "module_s")
    _record_into_library(codegen.JITCodeLibrary, "_finalize_specific", phases,
                         "machine code emission", "emit_s")
    codegen.CPUCodeLibrary.finalize = _finalize_measured(phases, own_only)
    return phases


def _record_into_library(cls, attr: str, phases: Phases, name: str, slot: str) -> None:
    original = getattr(cls, attr)

    def timed(self, *args, **kwargs):
        if not phases.inside("link + verify"):  # a cached library's object code loaded
            with phases.phase("object load"):
                return original(self, *args, **kwargs)
        t0 = time.perf_counter()
        with phases.phase(name):
            result = original(self, *args, **kwargs)
        if phases.libraries:
            setattr(phases.libraries[-1], slot, time.perf_counter() - t0)
        return result

    setattr(cls, attr, timed)


def report(phases: Phases, top: int = 20) -> str:
    libs = phases.libraries
    lines = [f"{'phase':<28} {'s':>8} {'calls':>6}"]
    for name, secs in sorted(phases.seconds.items(), key=lambda kv: -kv[1]):
        lines.append(f"{name:<28} {secs:8.2f} {phases.calls[name]:6d}")
    llvm = sum(lib.module_s + lib.emit_s for lib in libs)
    alone = sum(lib.own_only_s for lib in libs)
    own, linked = sum(lib.own for lib in libs), sum(lib.linked for lib in libs)
    lines += [f"libraries finalized: {len(libs)}; instructions before linking: own {own}, "
              f"linked from callees {linked}, NRT {sum(lib.nrt for lib in libs)}; "
              f"after optimization {sum(lib.after for lib in libs)}",
              f"module passes + emission: {llvm:.2f} s; on own modules alone: {alone:.2f} s",
              f"{'module s':>8} {'emit s':>7} {'alone s':>7} {'own':>7} {'linked':>7} "
              f"{'after':>7}  library"]
    for lib in sorted(libs, key=lambda r: -(r.module_s + r.emit_s))[:top]:
        lines.append(f"{lib.module_s:8.2f} {lib.emit_s:7.2f} {lib.own_only_s:7.2f} "
                     f"{lib.own:7d} {lib.linked:7d} {lib.after:7d}  {lib.name[:60]}")
    lines.append(f"{'copies':>6} {'instrs':>8}  library linked into others (most first)")
    for name, (copies, count) in sorted(phases.linked_copies.items(),
                                        key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"{copies:6d} {count:8d}  {name[:60]}")
    return "\n".join(lines)
