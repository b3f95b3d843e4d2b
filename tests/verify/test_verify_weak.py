"""A number in a rule is weak, as a Python number in a model: `add(x, 0.0) => x` verifies
through `cuvil rules verify`, its 0-d bf16/f16 instances included, and a rule that turns
a weak number into a 0-d tensor is caught."""

from __future__ import annotations

import random

import pytest

from cuvil.cli import main
from cuvil.ir.types import DType, TensorType
from cuvil.library import load
from cuvil.verify import VERIFIED, verify
from cuvil.verify.evaluate import fill_values
from cuvil.verify.instances import Instance
from cuvil.verify.verifier import check

ADD_ZERO = "ruleset algebra\nrule add_zero: add(x, 0.0) => x where is_float(x)\n"


@pytest.fixture
def add_zero(tmp_path):
    path = tmp_path / "add_zero.cvr"
    path.write_text(ADD_ZERO)
    return path


def test_add_zero_verifies_through_the_cli(add_zero, capsys):
    assert main(["rules", "verify", str(add_zero), "--instances", "200"]) == 0
    assert "add_zero: verified" in capsys.readouterr().out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_add_zero_verifies_on_every_seed(add_zero, seed):
    report = verify(load(add_zero), seed=seed, instances=100)
    assert [r.status for r in report.results] == [VERIFIED]


@pytest.mark.parametrize("dtype", [DType.bf16, DType.f16, DType.f32, DType.f64])
@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_add_zero_holds_on_each_float_dtype_and_rank(add_zero, dtype, shape):
    library = load(add_zero)
    inst = Instance({"x": TensorType(shape, dtype)}, {}, set(), {}, {}, frozenset())
    fill_values(inst, random.Random(0))
    assert check(library.rules[0], inst, library) is None


def test_a_weak_number_is_not_a_zero_dim_tensor(tmp_path):
    path = tmp_path / "wrong.cvr"
    path.write_text('ruleset algebra\nrule wrong: add(x, 0.0) => add(x, cast(0.0, dtype="f32"))'
                    " where is_float(x)\n")
    report = verify(load(path), seed=0, instances=100)
    assert not report.sound
