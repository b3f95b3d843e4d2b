"""A new elementwise op takes one catalog entry (here, in this file) and its aten mapping:
then `.cvr` rules can name it, `rules verify` checks rules about it against its element
expression, the cost model prices it, extraction picks it, and it is lowered to a kernel."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import cuvil
from cuvil.egraph.cost import CostModel
from cuvil.frontend.aten import ATEN, unary
from cuvil.ir.types import DType, TensorType
from cuvil.library import load
from cuvil.ops import registry
from cuvil.ops.elementwise import elementwise_op
from cuvil.verify import UNSOUND, VERIFIED, verify_rule

MISH = elementwise_op("mish", "x * tanh(log(exp(x) + 1))", float_only=True, work=24,
                      doc="x * tanh(softplus(x))")

SOUND = """\
ruleset fusion

# x * tanh(log(exp(x) + 1)) == mish(x)
rule mish_written_out: mul(x, tanh(log(add(exp(x), 1.0)))) => mish(x)
    where is_float(x)
"""
WRONG = SOUND.replace("add(exp(x), 1.0)", "add(exp(x), 2.0)")


@pytest.fixture
def new_op(monkeypatch):
    """The op, registered the way a catalog module registers its ops, and its mapping."""
    monkeypatch.setitem(registry.CATALOG, MISH.name, MISH)
    monkeypatch.setitem(ATEN, "mish", unary("mish"))
    return MISH


def rule_file(tmp_path, text: str):
    path = tmp_path / "mish.cvr"
    path.write_text(text)
    return load(path)


def test_its_reference_is_its_element_expression(new_op):
    x = torch.linspace(-5, 5, 101)
    torch.testing.assert_close(new_op.ref([x], {}), F.mish(x))
    t = TensorType((3, 4), DType.i64)
    with pytest.raises(cuvil.ShapeError, match="must be float"):
        registry.infer("mish", [t], {})


def test_rules_about_it_are_parsed_and_verified_against_its_definition(new_op, tmp_path):
    library = rule_file(tmp_path, SOUND)
    assert verify_rule(library.rules[0], library).status == VERIFIED
    wrong = rule_file(tmp_path, WRONG)
    assert verify_rule(wrong.rules[0], wrong).status == UNSOUND


def test_it_is_costed_and_extraction_picks_it(new_op, tmp_path):
    t = TensorType((64, 256), DType.f32)
    cost = CostModel({}).node_cost("mish", {}, [t], t)
    assert cost > 0
    library_dir = tmp_path / "rules"
    library_dir.mkdir()
    (library_dir / "mish.cvr").write_text(SOUND)

    def written_out(x):
        return x * torch.tanh(torch.log(torch.exp(x) + 1.0))

    x = torch.randn(8, 32)
    graph = cuvil.optimize(written_out, (x,), rules=library_dir)
    assert [n.op for n in graph if n.op not in ("input", "const", "scalar")] == ["mish"]


def test_it_is_lowered_to_a_kernel_and_matches_torch(new_op, lower):
    class Model(torch.nn.Module):
        def forward(self, x):
            return F.mish(x) * 2.0

    x = torch.randn(16, 40) * 4
    graph = cuvil.from_torch(Model(), (x,))
    assert "mish" in [n.op for n in graph]
    compiled = lower(graph)
    assert compiled.report.fallbacks == []
    torch.testing.assert_close(compiled(x), Model()(x))
