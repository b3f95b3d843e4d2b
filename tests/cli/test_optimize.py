"""`cuvil optimize` and `cuvil explain`: the optimized graph, the report, the provenance,
the egglog program and the pass timings; bad input is one line and exit 1; `--explain`
gives each rule's description once and groups nodes of one chain."""

from __future__ import annotations

import json
from pathlib import Path

from cuvil.cli import main
from cuvil.ir import Graph

REFERENCE = str(Path(__file__).parents[1] / "cvr" / "pass" / "reference.cvr")


def cuvil(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_optimize_prints_graph_report_and_files(capsys, tmp_path):
    egg, timing = tmp_path / "prog.egg", tmp_path / "passes.json"
    code, out, err = cuvil(capsys, "optimize", "zoo:mlp", "--rules", REFERENCE,
                           "--explain",
                           "--emit-egglog", str(egg), "--pass-timing", str(timing))
    assert code == 0, err
    graph = Graph.from_text(out.split("}\n", 1)[0] + "}\n")
    assert graph.ops().count("linear_relu") == 2
    assert "stopped: saturated" in out and "linear_relu ← linear_relu" in out
    assert ':name "matmul_add"' in egg.read_text()
    events = json.loads(timing.read_text())["traceEvents"]
    names = {e["name"] for e in events}
    assert {"parse", "check", "encode", "saturate", "extract", "decode"} <= names
    assert any(n.startswith("iteration") for n in names)


def test_explain_one_node(capsys):
    code, out, err = cuvil(capsys, "explain", "zoo:mlp", "--rules", REFERENCE,
                           "--node", "v1")
    assert code == 0, err
    assert out.startswith("v1 = linear_relu") and "matmul_add (" in out


def test_bad_inputs_are_one_line_errors(capsys, tmp_path):
    bad = tmp_path / "bad.cvr"
    bad.write_text("rule r: relu(x) => frobnicate(x)\n")
    for argv in (["optimize", "zoo:mlp", "--rules", str(bad)],
                 ["optimize", "zoo:mlp", "--rules", str(tmp_path / "missing")],
                 ["explain", "zoo:mlp", "--rules", REFERENCE, "--node", "nope"],
                 ["optimize", "zoo:mlp", "--rules", REFERENCE, "--time-limit",
                  "-1"]):
        code, out, err = cuvil(capsys, *argv)
        assert code == 1, argv
        assert "Traceback" not in err and err.strip(), argv


def test_explain_gives_each_rule_once_and_the_graph_only_used_constants(capsys):
    code, out, err = cuvil(capsys, "optimize", "zoo:cnn", "--explain")
    assert code == 0, err
    graph = Graph.from_text(out.split("}\n", 1)[0] + "}\n")
    used = {x for node in graph for x in node.inputs} | set(graph.outputs)
    assert all(n.name in used for n in graph if n.op in ("const", "scalar"))
    explained = out.split("}\n", 1)[1]
    paragraphs = [ln.strip() for ln in explained.splitlines() if ln.startswith("    ")]
    assert paragraphs and len(paragraphs) == len(set(paragraphs))
    folded = [ln for ln in explained.splitlines() if ln.endswith(" = const")]
    assert folded and all(", " in ln for ln in folded)  # constants of one chain: one entry
