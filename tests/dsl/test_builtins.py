"""The built-in table (`cuvil/dsl/builtins.py`) is the one definition every stage reads: the
checker's signatures, the optimizer's egglog tables, the cost model and `rules verify` give
each built-in the same value, and the reference page lists exactly the table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cuvil.dsl import ast
from cuvil.dsl.builtins import BUILTINS, COST, GUARD, NOWHERE, TABLE
from cuvil.dsl.expressions import COST_BUILTINS, GUARD_BUILTINS
from cuvil.egraph.cost import CostModel
from cuvil.egraph.encode import ANALYSIS_DECLS
from cuvil.egraph.guards import CLASS_ANALYSES, TYPE_ANALYSES
from cuvil.egraph.typer import TypeTable, analysis_commands
from cuvil.ir.types import NHWC, DType, TensorType
from cuvil.verify.guards import Unknown, compute

DOC = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cvr.md"
T = TensorType((2, 3, 4, 5), DType.f16, NHWC)
HERE = ast.Pos("test", 1, 1)


class Facts:
    def __init__(self, t: TensorType):
        self.types, self.attrs, self.consts, self.scalars = {"x": t}, {}, set(), {}
        self.targets = frozenset({"cpu"})


def call(name: str) -> ast.Builtin:
    params = BUILTINS[name].params
    args = [ast.Var("x", HERE)] + [ast.Literal(-1, HERE) for _ in params[1:]]
    return ast.Builtin(name, tuple(args), HERE)


def test_the_reference_page_lists_the_table():
    rows = re.findall(r"^\| `(\w+)\(.*?\)` \| (\w+) \| ([\w, ]+) \|", DOC.read_text(), re.M)
    documented = {name: (result, tuple(w.strip().rstrip("s") for w in where.split(",")))
                  for name, result, where in rows}
    table = {b.name: ("number" if b.result == "number" else b.result, b.where) for b in TABLE}
    assert documented == table


def test_the_checker_allows_what_the_table_says():
    assert set(GUARD_BUILTINS) == {b.name for b in TABLE if GUARD in b.where}
    assert set(COST_BUILTINS) == {b.name for b in TABLE if COST in b.where}


def test_the_optimizer_declares_a_table_for_each_kept_builtin():
    for name in TYPE_ANALYSES:
        assert f"(function t_{name} (i64)" in ANALYSIS_DECLS
    for name in CLASS_ANALYSES:
        assert f"(function {name} (T)" in ANALYSIS_DECLS
    kept = {b.name for b in TABLE if b.analysis}
    assert kept == {*TYPE_ANALYSES, *CLASS_ANALYSES, "dim"}


@pytest.mark.parametrize("name", sorted(n for n, b in BUILTINS.items()
                                        if b.analysis != "class" and b.params[:1] == ("tensor",)))
def test_cost_model_and_verifier_agree_on_each_value(name):
    by_verifier = compute(call(name), Facts(T))
    cost_model = CostModel({})
    by_cost = cost_model._builtin(name, [T, -1][:len(BUILTINS[name].params)], call(name),
                                  NOWHERE) if COST in BUILTINS[name].where else by_verifier
    assert by_cost == by_verifier
    expected = {"rank": 4, "dim": 5, "numel": 120, "bytes": 240, "shape": (2, 3, 4, 5),
                "dtype": "f16", "layout": NHWC, "device": "cpu", "is_float": True}
    assert by_verifier == expected[name]


def test_the_type_table_writes_each_value_the_rules_read():
    table = TypeTable(uses=set(TYPE_ANALYSES), dims={-1})
    rows = table._rows(7, T)
    assert "(set (t_rank 7) 4)" in rows and "(set (t_dim 7 -1) 5)" in rows
    assert "(set (t_numel 7) 120)" in rows and "(set (t_is_float 7) true)" in rows
    assert '(set (t_dtype 7) "f16")' in rows and '(set (t_shape 7) "(2, 3, 4, 5)")' in rows


SCALAR = TensorType((), DType.f32)
CLASS_KEPT = sorted(n for n, b in BUILTINS.items() if b.analysis == "class")


@pytest.mark.parametrize("const", [False, True])
@pytest.mark.parametrize("calibrated", [False, True])
def test_optimizer_and_verifier_agree_on_each_class_fact(const, calibrated):
    """`is_const`, `value` and the calibration facts of one 0-d tensor: what the optimizer
    states to egglog is what the verifier computes, and a fact it leaves out is one the
    verifier cannot know (or, for `calibrated` and `half_ok`, false)."""
    import torch

    x = torch.tensor(0.75)
    facts = Facts(SCALAR)
    if const:
        facts.consts, facts.scalars = {"x"}, {"x": 0.75}
    if calibrated:
        facts.tensors = {"x": x}
    observed = compute(call("absmax"), facts) if calibrated else None
    stated = analysis_commands("h", SCALAR, TypeTable(uses=set(CLASS_KEPT)), const,
                               0.75 if const else None,
                               {"absmax": observed, "scale": compute(call("scale"), facts),
                                "zero_point": compute(call("zero_point"), facts),
                                "half_ok": compute(call("half_ok"), facts)}
                               if calibrated else None)
    for name in CLASS_KEPT:
        atom = next((a for a in stated if a.startswith(f"(set ({name} h) ")), None)
        try:
            want = compute(call(name), facts)
        except Unknown:
            assert atom is None, name
            continue
        if atom is None:
            assert name in ("calibrated", "half_ok") and want is False
        elif isinstance(want, bool):
            assert atom == f"(set ({name} h) {str(want).lower()})", name
        else:
            number = atom.removeprefix(f"(set ({name} h) ").rstrip(")").split()[-1]
            assert float(number) == pytest.approx(want), name


def test_a_declared_cost_reads_the_node_builtins_from_the_table():
    """`roofline()`, `flops()` and `moved()` in a `cost` mean this node's own figures."""
    from cuvil.dsl.parser import parse

    module = parse("cost relu(x) = roofline() * 2 + flops() + moved() / 1000\n", "t.cvr")
    decl = next(item for item in module.items if isinstance(item, ast.CostDecl))
    model = CostModel({}, costs={"relu": decl})
    t = TensorType((64, 64), DType.f32)
    p = model.params("cpu")
    plain = CostModel({}).node_cost("relu", {}, [t], t)
    flops = model.flops("relu", {}, [t], t)
    assert model.node_cost("relu", {}, [t], t) == pytest.approx(
        plain * 2 + flops + 2 * model.bytes(t) / 1000)
    assert p["gflops"] > 0


@pytest.mark.parametrize("targets", [frozenset({"cpu"}), frozenset({"cpu", "cuda"})])
def test_has_target_means_the_same_to_optimizer_and_verifier(targets):
    from cuvil.egraph.guards import GuardCompiler

    guard = ast.Builtin("has_target", (ast.Literal("cuda", HERE),), HERE)
    facts = Facts(T)
    facts.targets = targets
    compiled = GuardCompiler({}, tuple(targets), "test").compile(guard)
    assert (compiled == [[]]) == compute(guard, facts) == ("cuda" in targets)
