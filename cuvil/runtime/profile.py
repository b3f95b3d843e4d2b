"""Runtime traces: every step of a compiled call timed, as Chrome-trace JSON and a table.

    prof = compiled.profile((x,), runs=20, trace="trace.json")
    print(prof)                      # op kind, count, mean us, share of the time
    prof.node_latency_ms()           # optimized graph node -> ms per call (graph_dump)

The normal call path pays nothing: profiling generates a second function,
`entry_profiled` (`cuvil.lower.codegen.instrumented_entry`), which calls the same
compiled kernels with a `lap(i)` after step i, and runs it on a shallow copy of the
compiled graph (same plans, buffers and lock). With `CUVIL_TRACE=trace.json` in the
environment every compiled graph of the process runs that function (for its first
`MAX_TRACED_CALLS` calls), and the trace of all their calls (with each compile's pass
timings, on one clock) is written at exit, with one summary table per graph on stderr. A
graph's first call is cold (it loads kernels and warms caches): it is in the trace and its
time is shown on its own, but the table's means are of the calls after it.
"""

from __future__ import annotations

import atexit
import copy
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuvil.atomic import write_text
from cuvil.errors import CuvilError
from cuvil.ir import devices
from cuvil.lower.codegen import instrumented_entry
from cuvil.lower.report import StepReport
from cuvil.runtime.roofline import KernelRow, kernel_rows, kernel_table, symbol_sizes
from cuvil.trace import chrome_trace


@dataclass
class Call:
    start_ns: int
    end_ns: int
    spans: list[tuple[int, int, int]]  # (step, start ns, end ns), in order


class TimedEntry:
    """A drop-in for `entry` that records each step's time in `calls`."""

    def __init__(self, compiled, max_calls: int | None = None):
        self.max_calls = max_calls  # later calls run the untimed entry
        self.original = getattr(compiled._entry, "original", compiled._entry)  # `entry`
        namespace = dict(self.original.__globals__)  # the module's kernels and imports
        exec(instrumented_entry(compiled._program), namespace)
        self._profiled = namespace["entry_profiled"]
        self.calls: list[Call] = []
        self._spans: list[tuple[int, int, int]] = []
        self._last = 0
        self._sync = _device_sync(compiled._program)

    def lap(self, step: int) -> None:
        """Step `step` ran from the previous lap until now (this lap's cost not counted);
        GPU kernels run asynchronously, so a graph with device arrays waits for them."""
        self._sync()
        now = time.perf_counter_ns()
        if step >= 0:
            self._spans.append((step, self._last, now))
        self._last = time.perf_counter_ns()

    def __call__(self, *args: Any) -> tuple | None:
        """What `entry` returns (`Program.returns`), each step timed."""
        if self.max_calls is not None and len(self.calls) >= self.max_calls:
            return self.original(*args)
        self._spans = []
        start = time.perf_counter_ns()
        returned = self._profiled(*args, self.lap)
        self.calls.append(Call(start, time.perf_counter_ns(), self._spans))
        return returned


def _device_sync(program):
    """What makes a step's time its own: the `synchronize` hook of each device whose values
    the program holds and whose kernels run queued (the host's run as they are called)."""
    hooks = list(dict.fromkeys(devices.device(d).synchronize for d in
                               sorted({a.device for a in program.arrays.values()})))
    hooks = [h for h in hooks if h is not None]
    if len(hooks) <= 1:
        return hooks[0] if hooks else lambda: None

    def synchronize_all() -> None:
        for hook in hooks:
            hook()

    return synchronize_all


def timed_twin(compiled) -> tuple[Any, TimedEntry]:
    """A shallow copy of `compiled` that runs the instrumented entry, and that entry."""
    timed = TimedEntry(compiled)
    twin = copy.copy(compiled)
    twin.use_entry(timed)
    return twin, timed


@dataclass
class SummaryRow:
    op: str
    template: str
    count: int  # steps per call
    mean_us: float  # per step
    share: float  # of the time of all steps, in percent


@dataclass
class Profile:
    """Timed calls of one compiled graph; `str()` is the summary table."""

    steps: list[StepReport]
    calls: list[Call]
    outputs: Any = None  # the last call's results
    compile_trace: Any = None  # the compile's `cuvil.trace.Tracer`, if it had one
    name: str = "graph"
    origin_ns: int = field(default=0)
    row: int = 0  # trace rows 2*row (compile) and 2*row + 1 (runtime): one pair per graph
    kernels: list[KernelRow] = field(default_factory=list)  # with the cost model's prices
    first: Call | None = None  # the cold first call: in the trace, not in the means

    def step_means_us(self) -> list[float]:
        """Mean time of each step over the calls, in microseconds."""
        totals = [0] * len(self.steps)
        for call in self.calls:
            for step, start, end in call.spans:
                totals[step] += end - start
        return [t / 1e3 / max(len(self.calls), 1) for t in totals]

    def node_latency_ms(self) -> dict[str, float]:
        """Milliseconds per call spent on each optimized graph node (its steps' sum)."""
        latency: dict[str, float] = {}
        for step, mean in zip(self.steps, self.step_means_us(), strict=True):
            if step.node:
                latency[step.node] = latency.get(step.node, 0.0) + mean / 1e3
        return latency

    def summary_rows(self) -> list[SummaryRow]:
        """Steps by (op, template), the most time first; the shares sum to 100."""
        grouped: dict[tuple[str, str], list[float]] = {}
        for step, mean in zip(self.steps, self.step_means_us(), strict=True):
            grouped.setdefault((step.op, step.template), []).append(mean)
        total = sum(sum(v) for v in grouped.values()) or 1.0
        rows = [SummaryRow(op, template, len(v), sum(v) / len(v), 100 * sum(v) / total)
                for (op, template), v in grouped.items()]
        return sorted(rows, key=lambda r: (-r.share, r.op))

    def call_us(self) -> float:
        """Mean time of a whole `entry` call (steps plus dispatch between them)."""
        return sum(c.end_ns - c.start_ns for c in self.calls) / 1e3 / max(len(self.calls), 1)

    def __str__(self) -> str:
        return summary_table(self)

    def kernel_table(self) -> str:
        """Each step measured, predicted by the cost model and against its roofline
        (`cuvil.runtime.roofline`); empty for a graph compiled without a cost model."""
        return kernel_table(self.kernels) if self.kernels else ""

    def trace_events(self) -> list[dict[str, Any]]:
        """Chrome-trace events: the compile's passes (if traced), then every timed call."""
        return compile_events(self) + runtime_events(self)

    def to_json(self) -> str:
        return chrome_trace(self.trace_events())

    def write(self, path: str | Path) -> None:
        write_text(path, self.to_json())


def summary_table(prof: Profile) -> str:
    head = f"{prof.name}: {len(prof.steps)} step(s), {len(prof.calls)} timed call(s)"
    if prof.calls:
        head += f", {prof.call_us():.1f} us per call"
    if prof.first is not None:
        cold_us = (prof.first.end_ns - prof.first.start_ns) / 1e3
        head += f"; first (cold) call {cold_us:.1f} us, not in the means"
    if not prof.calls:
        return head
    rows = prof.summary_rows()
    width = max([len(r.op) for r in rows] + [2])
    lines = [head,
             f"  {'op':<{width}}  {'kernel':<12} {'count':>5} {'mean us':>10} {'share':>7}"]
    for r in rows:
        lines.append(f"  {r.op:<{width}}  {r.template:<12} {r.count:>5} {r.mean_us:>10.1f} "
                     f"{r.share:>6.1f}%")
    return "\n".join(lines)


def compile_events(prof: Profile) -> list[dict[str, Any]]:
    """The compile's pass timings, moved onto the runtime clock (`prof.origin_ns`)."""
    tracer = prof.compile_trace
    if tracer is None:
        return []
    shift = round((tracer.origin * 1e9 - prof.origin_ns) / 1e3, 1)
    tid = 2 * prof.row
    events = [{**e, "ts": round(e["ts"] + shift, 1), "tid": tid} for e in tracer.events]
    return [_thread_name(tid, f"compile {prof.name}")] + events


def runtime_events(prof: Profile) -> list[dict[str, Any]]:
    """One event per call, and one per step inside it."""
    tid = 2 * prof.row + 1
    events = [_thread_name(tid, f"run {prof.name}")]
    calls = ([prof.first] if prof.first is not None else []) + prof.calls
    for i, call in enumerate(calls):
        name = "call 0 (cold)" if call is prof.first else f"call {i}"
        events.append(_complete(name, "call", (call.start_ns, call.end_ns), prof,
                                {"steps": len(call.spans)}))
        for step_index, start, end in call.spans:
            step = prof.steps[step_index]
            args = {"step": step_index, "op": step.op, "template": step.template,
                    "node": step.node, "nodes": list(step.nodes), "value": step.value}
            events.append(_complete(step.name, step.kind, (start, end), prof, args))
    return events


def _complete(name: str, category: str, span_ns: tuple[int, int], prof: Profile,
              args: dict[str, Any]) -> dict[str, Any]:
    start, end = span_ns
    return {"name": name, "cat": category, "ph": "X", "pid": os.getpid(),
            "tid": 2 * prof.row + 1, "ts": round((start - prof.origin_ns) / 1e3, 3),
            "dur": round((end - start) / 1e3, 3), "args": args}


def _thread_name(tid: int, name: str) -> dict[str, Any]:
    return {"name": "thread_name", "ph": "M", "pid": os.getpid(), "tid": tid,
            "args": {"name": name}}


def profile(compiled, inputs: Any, runs: int = 10, *, warmup: int = 1,
            trace: str | Path | None = None) -> Profile:
    """`compiled` run on `inputs` `warmup` times, then `runs` times with every step timed."""
    if runs < 1 or warmup < 0:
        raise CuvilError(f"profile needs runs >= 1 and warmup >= 0, got {runs} and {warmup}")
    args = tuple(inputs) if isinstance(inputs, tuple | list) else (inputs,)
    twin, timed = timed_twin(compiled)
    outputs = None
    for _ in range(warmup + runs):
        outputs = twin(*args)
    result = Profile(compiled.report.steps, timed.calls[warmup:], outputs,
                     getattr(compiled, "compile_trace", None), compiled.graph.name)
    result.origin_ns = _origin_ns(result)
    pricing = getattr(compiled, "pricing", None)  # set by `cuvil.compile`
    if pricing is not None and result.calls:
        graph, costs = pricing()
        result.kernels = kernel_rows(result.steps, result.step_means_us(), graph, costs,
                                     symbol_sizes(graph, args))
    if trace is not None:
        result.write(trace)
    return result


def _origin_ns(prof: Profile) -> int:
    """Time zero of the trace: the compile's start if it was traced, else the first call."""
    if prof.compile_trace is not None:
        return round(prof.compile_trace.origin * 1e9)
    calls = ([prof.first] if prof.first is not None else []) + prof.calls
    return calls[0].start_ns if calls else time.perf_counter_ns()


# -- CUVIL_TRACE: every call of every compiled graph, written at exit ------------------------
MAX_TRACED_CALLS = 10_000  # per compiled graph: a long-running process's trace stays bounded
_traced: list[tuple[Any, TimedEntry]] = []


def trace_every_call(compiled, path: str) -> None:
    """Make `compiled` time all its calls; the process writes them to `path` at exit."""
    if not _traced:
        atexit.register(write_session_trace, path)
    timed = TimedEntry(compiled, MAX_TRACED_CALLS)
    compiled.use_entry(timed)
    _traced.append((compiled, timed))


def session_profiles() -> list[Profile]:
    """A `Profile` of each compiled graph traced through `CUVIL_TRACE`, on one clock; its
    first call is `first` (cold), the rest are `calls`."""
    profiles = [Profile(c.report.steps, list(t.calls[1:]), None,
                        getattr(c, "compile_trace", None), c.graph.name,
                        first=t.calls[0] if t.calls else None) for c, t in _traced]
    origins = [_origin_ns(p) for p in profiles]
    for row, prof in enumerate(profiles):
        prof.origin_ns, prof.row = min(origins), row
    return profiles


def write_session_trace(path: str) -> None:
    """The `CUVIL_TRACE` file: every traced graph's passes and calls; tables on stderr."""
    profiles = session_profiles()
    events = [e for prof in profiles for e in prof.trace_events()]
    write_text(path, chrome_trace(events))
    for prof in profiles:
        if prof.calls or prof.first is not None:
            print(prof, file=sys.stderr)
    print(f"cuvil: runtime trace written to {path}", file=sys.stderr)
