"""Instances by construction: for every op of the catalog, random instances of
`op(x0, x1, ..., attr=a)` with every input and attribute free are well typed (the catalog's
`infer` accepts them), varied, and run through the reference implementation."""

from __future__ import annotations

import random

import pytest

from cuvil.dsl.ast import Call, Pos, Var
from cuvil.ops import all_ops, registry
from cuvil.ops.draw import Invalid, factorize
from cuvil.verify.evaluate import fill_values, type_of, value_of
from cuvil.verify.guards import Hints
from cuvil.verify.instances import Builder, new_instance

HERE = Pos("test", 1, 1)
OPS = sorted(name for name, op in all_ops().items()
             if op.kind not in (registry.LEAF, registry.OPAQUE) or name == "scalar")


def free_call(name: str) -> Call:
    op = all_ops()[name]
    n = 3 if op.variadic else len(op.inputs)
    return Call(name, tuple(Var(f"x{i}", HERE) for i in range(n)),
                tuple((a.name, Var(f"a_{a.name}", HERE)) for a in op.attrs), HERE)


@pytest.mark.parametrize("name", OPS)
def test_every_op_gets_valid_varied_instances(name):
    term, rng = free_call(name), random.Random(0)
    built, ran, shapes = 0, 0, set()
    for _ in range(40):
        try:
            inst = new_instance(Builder({}, Hints(), rng, 5), term, frozenset({"cpu"}))
        except Invalid:
            continue
        built += 1
        out = type_of(term, inst, {}, "test")  # raises if the catalog rejects it
        shapes.add((tuple(t.shape for t in inst.types.values()), tuple(out.shape)))
        fill_values(inst, rng)
        try:
            value = value_of(term, inst, {})
        except RuntimeError:  # torch lacks a kernel the catalog allows (silu on ints)
            continue
        ran += 1
        assert tuple(value.shape) == tuple(out.shape) and value.dtype == out.dtype.torch
    assert built >= 30, f"{name}: only {built} of 40 attempts gave an instance"
    assert ran >= 0.85 * built
    assert len(shapes) >= {"scalar": 1, "arange": 5}.get(name, 10)  # arange: 1-d, no input


def test_instances_grow_with_the_size_allowed():
    term, rng = free_call("add"), random.Random(1)
    small = [new_instance(Builder({}, Hints(), rng, 1), term, frozenset()) for _ in range(20)]
    assert all(d == 1 for inst in small for t in inst.types.values() for d in t.shape)
    big = [new_instance(Builder({}, Hints(), rng, 8), term, frozenset()) for _ in range(20)]
    assert max(d for inst in big for t in inst.types.values() for d in t.shape) > 4


def test_factorize_gives_every_factor_of_the_number():
    rng = random.Random(2)
    for n in (1, 7, 12, 64, 360):
        for parts in (1, 2, 4):
            factors = factorize(n, parts, rng)
            assert len(factors) == parts and all(f >= 1 for f in factors)
            product = 1
            for f in factors:
                product *= f
            assert product == n
