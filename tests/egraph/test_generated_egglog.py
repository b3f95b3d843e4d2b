"""The generated egglog program: each rule carries its `.cvr` name and `path:line`; the rule
text is snapshot-tested (regenerate with CUVIL_UPDATE_SNAPSHOTS=1), and the whole program
replays in a fresh egglog."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from egglog import bindings

import cuvil
from cuvil.egraph.session import Session
from cuvil.ir import Graph, TensorType, sym
from cuvil.library import load
from cuvil.options import Limits

SNAPSHOT = Path(__file__).parent / "snapshots" / "reference_rules.egg"


def _mlp() -> Graph:
    g = Graph("mlp")
    x = g.input("x", TensorType((sym("batch"), 16), "f32"))
    w, b = g.const(torch.randn(16, 8), ref="w"), g.const(torch.randn(8), ref="b")
    g.set_outputs(g.add("relu", [g.add("add", [g.add("matmul", [x, w]), b])]))
    return g


def test_rules_snapshot(reference_rules):
    library = load(reference_rules)
    session = Session(_mlp(), library, ("cpu",), Limits())
    text = "\n\n".join(r.text for r in session.rules).replace(reference_rules, "reference.cvr")
    if os.environ.get("CUVIL_UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(text + "\n")
    assert text + "\n" == SNAPSHOT.read_text()
    for rule in library.rules:
        if rule.label != "matmul_on_cuda":  # its guard is false without a cuda target
            assert f':name "{rule.label}"' in text and f"reference.cvr:{rule.pos.line}" in text


def test_emitted_program_replays(reference_rules):
    out = cuvil.optimize(_mlp(), rules=reference_rules)
    program = out.report.egglog
    assert "(run-schedule" in program and "; " in program
    bindings.EGraph().parse_and_run_program(program)
