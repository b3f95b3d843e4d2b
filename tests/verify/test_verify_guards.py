"""Guards over verification instances mean what they mean in the optimizer: each guard is
checked against the optimizer itself (does the guarded rule fire on a graph of that type?),
and the facts read off a guard shape the instances built."""

from __future__ import annotations

import random

import pytest

import cuvil
from cuvil.dsl import ast
from cuvil.ir import Graph, TensorType
from cuvil.library import load
from cuvil.verify.guards import hints, holds
from cuvil.verify.instances import Builder, Instance, new_instance

GUARDS = [
    'rank(x) == 2 and dim(x, -1) % 4 == 0',
    'not (dim(x, 5) == 3)',  # unknown: false, even negated
    'dim(x, 5) != 3 or rank(x) == 4',
    'layout(x) == "NCHW" or numel(x) > 100',
    'not (rank(x) == 3) and is_float(x)',
    'dim(x, 0) / 4 >= 0.5 and dim(x, 0) - 1 < rank(x) * 2',
    'dtype(x) == "i64" or device(x) != "cpu"',
    'shape(x) == (2, 8) and not is_const(x)',
    'has_target("cuda") and rank(x) > 1',
    'not has_target("cuda")',
    '-dim(x, 0) * 3 + 7 > 0 and (numel(x) % 3 == 0 or True)',
]
TYPES = [TensorType((2, 8), "f32"), TensorType((2, 3, 4, 4), "f32"),
         TensorType((2, 3, 4, 4), "f32", "NHWC"), TensorType((5,), "i64")]


def _rules() -> str:
    return "".join(f"rule g{i}: relu(x) => clamp(x, min=0.0)\n    where {g}\n"
                   for i, g in enumerate(GUARDS))


@pytest.mark.parametrize("targets", [("cpu",), ("cpu", "cuda")])
@pytest.mark.parametrize("t", TYPES, ids=str)
def test_guards_agree_with_the_optimizer(t, targets):
    g = Graph("g")
    x = g.input("x", t)
    if t.layout == "NHWC":
        x = g.add("to_layout", [g.input("y", TensorType(t.shape, "f32"))], {"layout": "NHWC"})
    g.set_outputs(g.add("relu", [x]))
    rules = _rules()
    fired = cuvil.optimize(g, rules=rules, target=list(targets), verify=False).report.rules
    facts = Instance({"x": t}, {}, set(), {}, {}, frozenset(targets))
    verdicts = []
    for rule in load(rules).rules:
        verdicts.append(holds(rule.guard, facts))
        assert verdicts[-1] == bool(fired[rule.label].matches), \
            f"{rule.label}: where {GUARDS[int(rule.label[1:])]} on {t} with {targets}"
    assert any(verdicts) and not all(verdicts)


def _guard(text: str) -> ast.Expr:
    return load(f"rule r: mul(x, c) => x\n    where {text}\n").rules[0].guard


def test_attribute_variables_and_values_of_constants():
    rule = load("rule r: mul(x, c) => x\n    where value(c) == 1.0 and is_const(c)\n").rules[0]
    one = Instance({"x": TensorType((3,), "f32"), "c": TensorType((), "f32")}, {}, {"c"},
                   {"c": 1.0}, {}, frozenset())
    assert holds(rule.guard, one)
    assert not holds(rule.guard, Instance(one.types, {}, {"c"}, {"c": 2.0}, {}, frozenset()))
    assert not holds(rule.guard, Instance(one.types, {}, set(), {}, {}, frozenset()))
    flat = load("rule f: flatten(x, start_dim=s) => x\n    where s % 2 == 1 and s < rank(x)\n")
    facts = Instance({"x": TensorType((2, 3, 4), "f32")}, {"s": 1}, set(), {}, {}, frozenset())
    assert holds(flat.rules[0].guard, facts)
    facts.attrs["s"] = -1  # egglog's % truncates: -1 % 2 == -1
    assert not holds(flat.rules[0].guard, facts)


def test_firm_facts_come_from_the_top_level_and_soft_ones_from_the_rest():
    facts = hints(_guard('rank(x) == 3 and dim(x, -1) % 8 == 0 and (dtype(x) == "f16" or '
                         'numel(x) > 4096) and value(c) >= 2.0'))
    assert ("x", "rank", 3) in facts.firm and ("x", ("dim", -1), ("multiple", 8)) in facts.firm
    assert ("c", "rank", 0) in facts.firm and ("c", "const", True) in facts.firm
    assert ("c", "value", 2.0) in facts.firm
    assert ("x", "dtype", "f16") in facts.soft and ("x", "min_numel", 4097) in facts.soft


def test_instances_are_built_to_the_guard():
    rule = load('rule r: relu(x) => x\n    where rank(x) == 3 and dim(x, -1) % 8 == 0 '
                'and dtype(x) == "f16" and layout(x) == "contiguous"\n').rules[0]
    rng = random.Random(0)
    for _ in range(20):
        inst = new_instance(Builder({}, hints(rule.guard), rng, 4), rule.lhs, frozenset())
        x = inst.types["x"]
        assert x.rank == 3 and x.shape[-1] in (8, 16) and str(x.dtype) == "f16"
        assert holds(rule.guard, inst)
