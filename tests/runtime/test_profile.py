"""Runtime traces: `compiled.profile` and `CUVIL_TRACE` time every kernel, fallback and copy
as Chrome-trace JSON matching the report's steps; profiled calls compute what normal calls
compute; the summary's shares sum to 100%; steps map back to the optimized graph's nodes;
`CUVIL_TRACE`'s means leave out each graph's cold first call, which is shown on its own.
No assertion is about how long anything took (the machine is noisy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from runtime_support import B, t

import cuvil
from cuvil.errors import CuvilError
from cuvil.ir import Graph
from cuvil.runtime import profile as profile_module

REFERENCE = str(Path(__file__).parents[1] / "cvr" / "pass" / "reference.cvr")


def mixed_graph() -> Graph:
    """A GEMM, a fused add+relu, a torch fallback (cumsum), a multiply, and an output that
    is an input (a copy): every kind of step."""
    torch.manual_seed(0)
    g = Graph("mixed")
    x = g.input("x", t(B, 16))
    w, b = g.const(torch.randn(16, 8), "w"), g.const(torch.randn(8), "b")
    h = g.add("relu", [g.add("add", [g.add("matmul", [x, w]), b])])
    c = g.add("torch_op", [h], {"target": "aten.cumsum.default", "args": ("$0", 1),
                                "out": "f32[batch,8]"}, source="model.py:7")
    g.set_outputs((g.add("mul", [c, g.scalar(2.0)]), x))
    return g


@pytest.fixture(scope="module")
def mixed(lower):
    g = mixed_graph()
    return g, lower(g)


def kernel_events(trace: dict) -> list[dict]:
    return [e for e in trace["traceEvents"] if e.get("cat") in ("kernel", "fallback", "copy")]


def assert_chrome_trace(trace: dict) -> None:
    """The shape Perfetto and chrome://tracing read: complete events and metadata."""
    assert isinstance(trace["traceEvents"], list) and trace["traceEvents"]
    for e in trace["traceEvents"]:
        assert {"name", "ph", "pid", "tid"} <= set(e) and e["ph"] in ("X", "M")
        if e["ph"] == "X":
            assert e["dur"] >= 0 and isinstance(e["ts"], int | float)


def test_profile_trace_has_one_event_per_step_per_call(mixed, tmp_path):
    g, compiled = mixed
    x = torch.randn(3, 16)
    prof = compiled.profile((x,), runs=4, trace=tmp_path / "trace.json")
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert_chrome_trace(trace)
    steps = compiled.report.steps
    assert [s.kind for s in steps] == ["kernel", "kernel", "fallback", "kernel", "copy"]
    events = kernel_events(trace)
    assert [e["name"] for e in events] == [s.name for s in steps] * 4
    assert [e["args"]["step"] for e in events] == list(range(len(steps))) * 4
    assert {e["name"] for e in events if e["cat"] == "kernel"} == \
        {k.name for k in compiled.report.kernels}
    calls = [e for e in trace["traceEvents"] if e.get("cat") == "call"]
    assert len(calls) == 4
    for call, first in zip(calls, events[::len(steps)], strict=True):
        assert call["ts"] <= first["ts"] <= call["ts"] + call["dur"]
    assert len(prof.calls) == 4


def test_summary_shares_sum_to_100_and_counts_to_the_steps(mixed):
    _, compiled = mixed
    prof = compiled.profile(torch.randn(2, 16), runs=3)
    rows = prof.summary_rows()
    assert sum(r.share for r in rows) == pytest.approx(100.0, abs=1e-6)
    assert sum(r.count for r in rows) == len(compiled.report.steps)
    assert {r.op for r in rows} == {"matmul", "relu", "torch_op aten.cumsum.default", "mul",
                                    "copy"}
    table = str(prof)
    assert "mean us" in table and "share" in table
    assert all(r.op in table for r in rows)


def test_profiled_results_equal_normal_call_and_reference(mixed):
    g, compiled = mixed
    x = torch.randn(5, 16)
    prof = compiled.profile(x, runs=2)
    normal = compiled(x)
    reference = cuvil.run(g, x)
    for got, want, ref in zip(prof.outputs, normal, reference, strict=True):
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(got, ref)
    assert "entry_profiled" not in compiled.source  # the normal module is not instrumented


def test_steps_map_to_the_graph_nodes_they_compute(mixed):
    g, compiled = mixed
    steps = compiled.report.steps
    ops = {n.name for n in g if n.op not in ("input", "const", "scalar")}
    covered = {n for s in steps for n in s.nodes}
    assert ops <= covered
    fused = next(s for s in steps if len(s.nodes) > 1)
    assert [g[n].op for n in fused.nodes] == ["add", "relu"] and g[fused.node].op == "relu"
    latency = compiled.profile(torch.randn(2, 16), runs=1).node_latency_ms()
    assert set(latency) == {s.node for s in steps if s.node} and set(latency) <= ops


def test_bad_profile_arguments_are_one_line_errors(mixed):
    _, compiled = mixed
    with pytest.raises(CuvilError, match="runs >= 1"):
        compiled.profile(torch.randn(2, 16), runs=0)


def test_pass_timings_and_runtime_share_one_trace(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4)).eval()
    x = torch.randn(3, 16)
    compiled = cuvil.compile(model, (x,), rules=REFERENCE, trace=tmp_path / "passes.json")
    prof = compiled.profile(x, runs=2, trace=tmp_path / "trace.json")
    with torch.no_grad():
        torch.testing.assert_close(prof.outputs, model(x))
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert_chrome_trace(trace)
    passes = {e["name"] for e in json.loads((tmp_path / "passes.json").read_text())
              ["traceEvents"]}
    compile_rows = [e for e in trace["traceEvents"] if e["tid"] == 0 and e["ph"] == "X"]
    assert {e["name"] for e in compile_rows} == passes
    compiled_by = max(e["ts"] + e["dur"] for e in compile_rows)  # lowering, or a cache hit
    assert all(e["ts"] >= compiled_by for e in kernel_events(trace))
    assert {e["args"]["node"] for e in kernel_events(trace)} <= set(compiled.report.graph.nodes)


SCRIPT = """
import sys, torch
sys.path.insert(0, {tests!r})
from test_profile import mixed_graph
from cuvil.runtime import compile_graph
compiled = compile_graph(mixed_graph())
for batch in (2, 3, 2):
    compiled(torch.randn(batch, 16))
"""


def test_cuvil_trace_times_every_call_of_the_process(tmp_path):
    path = tmp_path / "run.json"
    env = {**os.environ, "CUVIL_TRACE": str(path)}
    code = SCRIPT.format(tests=str(Path(__file__).parent))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=600, check=True)
    assert f"runtime trace written to {path}" in done.stderr
    assert "2 timed call(s)" in done.stderr and "share" in done.stderr
    assert "first (cold) call" in done.stderr
    trace = json.loads(path.read_text())
    assert_chrome_trace(trace)
    events = kernel_events(trace)
    assert len(events) == 3 * 5
    assert [e["cat"] for e in events[:5]] == ["kernel", "kernel", "fallback", "kernel", "copy"]


def test_cuvil_trace_means_leave_out_the_cold_first_call(mixed, monkeypatch):
    _, compiled = mixed
    steps = len(compiled.report.steps)

    def call(start: int, step_ns: int) -> profile_module.Call:
        spans = [(i, start + i * step_ns, start + (i + 1) * step_ns) for i in range(steps)]
        return profile_module.Call(start, start + steps * step_ns, spans)

    timed = profile_module.TimedEntry(compiled)
    timed.calls = [call(0, 9_000_000), call(10**9, 3_000), call(2 * 10**9, 3_000)]
    monkeypatch.setattr(profile_module, "_traced", [(compiled, timed)])
    (prof,) = profile_module.session_profiles()
    assert prof.first is timed.calls[0] and prof.calls == timed.calls[1:]
    assert prof.step_means_us() == [3.0] * steps and prof.call_us() == 3.0 * steps
    assert "2 timed call(s)" in str(prof) and f"cold) call {9_000 * steps:.1f} us" in str(prof)
    calls = [e["name"] for e in prof.trace_events() if e.get("cat") == "call"]
    assert calls == ["call 0 (cold)", "call 1", "call 2"]
