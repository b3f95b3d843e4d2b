"""`cuvil dump MODEL -o FILE`: the graph file coloured by measured latency, the summary
table, the merged trace; bad options are one line and exit 1, before any compile."""

from __future__ import annotations

import json
from pathlib import Path

from cuvil.cli import main

REFERENCE = str(Path(__file__).parents[1] / "cvr" / "pass" / "reference.cvr")


def cuvil(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_dump_writes_the_coloured_graph_table_and_merged_trace(capsys, tmp_path):
    dot, trace = tmp_path / "mlp.dot", tmp_path / "trace.json"
    code, out, err = cuvil(capsys, "dump", "zoo:mlp", "--rules", REFERENCE,
                           "-o", str(dot),
                           "--runs", "2", "--threshold", "0", "--trace", str(trace))
    assert code == 0, err
    text = dot.read_text()
    assert text.startswith('digraph "MLP"') and 'label="linear_relu [' in text
    assert "fillcolor=" in text and "reference.cvr:" in text
    assert "op" in out and "mean us" in out and "linear_relu" in out
    assert f"graph written to {dot}" in out
    events = json.loads(trace.read_text())["traceEvents"]
    threads = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert threads == {"compile MLP", "run MLP"}
    assert {"import", "saturate", "lower"} <= {e["name"] for e in events}
    assert any(e.get("cat") == "kernel" for e in events)


def test_dump_without_latency_draws_the_optimized_graph(capsys, tmp_path):
    dot = tmp_path / "mlp.gv"
    code, out, err = cuvil(capsys, "dump", "zoo:mlp", "--rules", REFERENCE,
                           "-o", str(dot),
                           "--no-latency")
    assert code == 0, err
    text = dot.read_text()
    assert 'label="linear_relu"' in text and "fillcolor=\"#" not in text


def test_bad_dump_options_are_one_line_errors(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no Graphviz
    for argv in (["dump", "zoo:mlp", "-o", str(tmp_path / "g.txt")],
                 ["dump", "zoo:mlp", "-o", str(tmp_path / "g.svg")],
                 ["dump", "zoo:mlp", "-o", str(tmp_path / "g.dot"), "--runs", "0"],
                 ["dump", "nope", "-o", str(tmp_path / "g.dot")],
                 ["dump", "zoo:mlp", "-o", str(tmp_path / "g.dot"), "--no-latency",
                  "--trace", str(tmp_path / "t.json")]):
        code, out, err = cuvil(capsys, *argv)
        assert code == 1, argv
        assert err.startswith("cuvil: error: ") and err.count("\n") == 1, argv
        assert "Traceback" not in err
    assert not list(tmp_path.iterdir())
