"""`cuvil.graph_dump`: DOT of the optimized graph, parsed back and checked: labels `op [ms]`
above the threshold, fills by latency band, tooltips with rules and their `path:line`,
edges as in the graph; SVG through Graphviz; bad paths are one-line errors. Latencies in
the band tests are given, not measured (the machine is noisy)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

import cuvil
from cuvil.dump import Timings, band_colour, dot_text, latency_label
from cuvil.errors import CuvilError
from cuvil.ir import Graph, TensorType, sym

REFERENCE = str(Path(__file__).parent / "cvr" / "pass" / "reference.cvr")
GREEN, YELLOW, RED = "#d4edda", "#fff3cd", "#f8d7da"
NODE = re.compile(r'^  "([^"]+)" \[(.*)\];$')
EDGE = re.compile(r'^  "([^"]+)" -> "([^"]+)";$')
ATTR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^,\s]+)')


def parse_dot(text: str) -> tuple[dict[str, dict[str, str]], list[tuple[str, str]]]:
    """Nodes (name -> attributes, unquoted) and edges of the DOT `dot_text` writes."""
    lines = text.splitlines()
    assert lines[0].startswith("digraph ") and lines[-1] == "}"
    nodes, edges = {}, []
    for line in lines[1:-1]:
        if m := EDGE.match(line):
            edges.append((m[1], m[2]))
        elif m := NODE.match(line):
            nodes[m[1]] = {k: _unquote(v) for k, v in ATTR.findall(m[2])}
    return nodes, edges


def _unquote(value: str) -> str:
    if not value.startswith('"'):
        return value
    return value[1:-1].replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")


def chain_graph() -> Graph:
    """x -> matmul -> add -> relu -> tanh -> exp (a const weight and bias; a scalar)."""
    g = Graph("chain")
    x = g.input("x", TensorType((sym("batch"), 4), "f32"))
    w, b = g.const(torch.ones(4, 4), "w"), g.const(torch.ones(4), "b")
    a = g.add("matmul", [x, w], name="a")
    s = g.add("add", [a, b], name="s")
    r = g.add("relu", [s], name="r")
    th = g.add("tanh", [r], name="th")
    g.set_outputs(g.add("mul", [th, g.scalar(2.0)], name="m"))
    return g


def test_labels_and_fills_follow_the_bands_and_the_threshold():
    g = chain_graph()
    timings = Timings(3, {"a": 0.01, "s": 0.05, "r": 0.3, "th": 2.0},
                      fused_into={"m": "th"})
    nodes, _ = parse_dot(dot_text(g, timings, threshold_ms=0.1))
    want = {"a": ("matmul", GREEN), "s": ("add", YELLOW), "r": ("relu [0.3ms]", YELLOW),
            "th": ("tanh [2.0ms]", RED), "m": ("mul", "white")}
    for name, (label, fill) in want.items():
        assert (nodes[name]["label"], nodes[name].get("fillcolor", "white")) == (label, fill)
    assert "dashed" in nodes["m"]["style"] and "th" in nodes["m"]["tooltip"]
    assert nodes["m"]["peripheries"] == "2"  # the output
    every = parse_dot(dot_text(g, timings, threshold_ms=0.0))[0]
    assert every["a"]["label"] == "matmul [0.01ms]" and every["s"]["label"] == "add [0.05ms]"
    plain = parse_dot(dot_text(g, None))[0]
    assert {n: a["label"] for n, a in plain.items()} == {
        "x": "input x", "a": "matmul", "s": "add", "r": "relu", "th": "tanh", "m": "mul"}
    assert all("fillcolor" not in a for a in plain.values())


def test_band_edges_and_latency_labels():
    assert [band_colour(ms) for ms in (0.0, 0.0499, 0.05, 0.5, 0.5001, 30.0)] == \
        [GREEN, GREEN, YELLOW, YELLOW, RED, RED]
    assert [latency_label(ms) for ms in (2.345, 0.123, 0.05, 12.6)] == \
        ["2.3ms", "0.12ms", "0.05ms", "13ms"]


def test_edges_are_the_graphs_without_constants_and_scalars():
    g = chain_graph()
    nodes, edges = parse_dot(dot_text(g, None))
    assert set(nodes) == {n.name for n in g if n.op not in ("const", "scalar")}
    assert edges == [("x", "a"), ("a", "s"), ("s", "r"), ("r", "th"), ("th", "m")]
    assert "w" in nodes["a"]["tooltip"] and "b" in nodes["s"]["tooltip"]


@pytest.fixture(scope="module")
def small_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4)).eval()
    return model, (torch.randn(3, 16),)


def test_tooltips_name_each_rule_with_its_path_and_line(small_model, tmp_path):
    model, inputs = small_model
    text = cuvil.graph_dump(model, tmp_path / "g.dot", include_latency=False,
                            example_inputs=inputs, rules=REFERENCE)
    assert (tmp_path / "g.dot").read_text() == text
    graph = cuvil.optimize(model, inputs, rules=REFERENCE)
    nodes, _ = parse_dot(text)
    rewritten = [n for n in graph if n.origin]
    assert {n.op for n in rewritten} == {"linear_relu", "linear"}
    for node in rewritten:
        tooltip = nodes[node.name]["tooltip"]
        for label in node.origin:
            where = graph.report.rules[label].where
            assert re.fullmatch(r".*reference\.cvr:\d+", where)
            assert f"{label} ({where})" in tooltip
        assert f"from {node.source}" in tooltip and node.source


def test_graph_dump_times_a_compiled_graph(small_model, tmp_path):
    model, inputs = small_model
    compiled = cuvil.compile(model, inputs, rules=REFERENCE)
    text = cuvil.graph_dump(compiled, tmp_path / "g.dot", example_inputs=inputs, runs=2,
                            latency_threshold_ms=0.0)
    nodes, _ = parse_dot(text)
    timed = {n: a for n, a in nodes.items() if "fillcolor" in a}
    assert set(timed) == {s.node for s in compiled.report.steps if s.node}
    for name, attrs in timed.items():
        ms = float(re.search(r"([\d.]+) ms per call", attrs["tooltip"])[1])
        assert attrs["fillcolor"] == band_colour(ms)
        assert re.fullmatch(rf"{compiled.report.graph[name].op} \[[\d.]+ms\]", attrs["label"])
        assert any(f"{k.name} [{k.template}]" in attrs["tooltip"]
                   for k in compiled.report.kernels)
    unlabelled = parse_dot(cuvil.graph_dump(compiled, tmp_path / "h.dot", runs=1,
                                            latency_threshold_ms=1e9))[0]
    assert all("[" not in a["label"] for a in unlabelled.values())  # made-up inputs ran


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_svg_is_rendered_by_graphviz_with_tooltips(small_model, tmp_path):
    model, inputs = small_model
    cuvil.graph_dump(model, tmp_path / "g.svg", include_latency=False, example_inputs=inputs,
                     rules=REFERENCE)
    svg = (tmp_path / "g.svg").read_text()
    assert "<svg" in svg and "linear_relu" in svg
    assert re.search(r'xlink:title="[^"]*reference\.cvr:\d+', svg)


def test_missing_graphviz_and_unknown_formats_are_one_line_errors(monkeypatch, tmp_path):
    g = chain_graph()
    monkeypatch.setenv("PATH", str(tmp_path))  # no `dot` here
    for name, message in (("g.svg", "Graphviz"), ("g.png", "Graphviz"), ("g.txt", "unknown")):
        with pytest.raises(CuvilError, match=message) as e:
            cuvil.graph_dump(g, tmp_path / name, include_latency=False)
        assert "\n" not in str(e.value)
        assert not (tmp_path / name).exists()
