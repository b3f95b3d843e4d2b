"""The built-in table (`cuvil/dsl/builtins.py`) is the one definition every stage reads: the
checker's signatures, the optimizer's egglog tables, the cost model and `rules verify` give
each built-in the same value, and the reference page lists exactly the table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cuvil.dsl import ast
from cuvil.dsl.builtins import BUILTINS, COST, GUARD, TABLE
from cuvil.dsl.expressions import COST_BUILTINS, GUARD_BUILTINS
from cuvil.egraph.cost import CostModel
from cuvil.egraph.encode import ANALYSIS_DECLS
from cuvil.egraph.guards import CLASS_ANALYSES, TYPE_ANALYSES
from cuvil.egraph.typer import TypeTable
from cuvil.ir.types import NHWC, DType, TensorType
from cuvil.verify.guards import compute

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
                                        if b.value is not None and b.params[:1] == ("tensor",)))
def test_cost_model_and_verifier_agree_on_each_value(name):
    by_verifier = compute(call(name), Facts(T))
    cost_model = CostModel({})
    by_cost = cost_model._builtin(name, [T, -1][:len(BUILTINS[name].params)], call(name)) \
        if COST in BUILTINS[name].where else by_verifier
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
