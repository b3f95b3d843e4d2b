"""E-class analyses: guards read shapes, layouts and constness of terms that rewrites create;
unknown means no match; a rule that changes a type without a conversion is rejected."""

from __future__ import annotations

import pytest
import torch

import cuvil
from cuvil.ir import Graph, TensorType, sym


def _conv_graph(channels, height=8) -> Graph:
    g = Graph("conv")
    x = g.input("x", TensorType((2, channels, height, height), "f32"))
    w = g.const(torch.randn(channels, channels, 3, 3), ref="w")
    g.set_outputs(g.add("relu", [g.add("conv2d", [x, w], {"padding": (1, 1)})]))
    return g


def _fired(graph, rules, label):
    return cuvil.optimize(graph, rules=rules, verify=False).report.rules[label].matches > 0


DIVISIBLE = "rule tag: relu(x) => relu(relu(x))\n    where dim(x, 1) % 8 == 0\n"


def test_guard_on_static_dims():
    assert _fired(_conv_graph(16), DIVISIBLE, "tag")
    assert not _fired(_conv_graph(12), DIVISIBLE, "tag")


def test_unknown_values_mean_no_match():
    g = Graph("sym")
    x = g.input("x", TensorType((2, sym("C")), "f32"))
    g.set_outputs(g.add("relu", [x]))
    assert not _fired(g, DIVISIBLE, "tag")  # arithmetic on a symbolic dim is unknown
    out_of_range = "rule tag: relu(x) => relu(relu(x))\n    where dim(x, 7) == 2\n"
    assert not _fired(g, out_of_range, "tag")
    negated = "rule tag: relu(x) => relu(relu(x))\n    where not (dim(x, 1) == 3)\n"
    assert not _fired(g, negated, "tag")  # not(unknown) is still unknown


def test_guards_with_or_and_targets():
    rules = ('rule tag: relu(x) => relu(relu(x))\n'
             '    where (rank(x) == 3 or layout(x) == "NCHW") and not has_target("cuda")\n')
    assert _fired(_conv_graph(4), rules, "tag")
    assert not cuvil.optimize(_conv_graph(4), rules=rules, target=["cpu", "cuda"],
                          verify=False) \
        .report.rules["tag"].matches


def test_guards_see_terms_that_rewrites_create():
    # `nhwc` creates to_layout(x, "NHWC"), a new e-class; `seen` can only match it if the
    # new class has a type (layout NHWC, dim 1 == 8) by the time it runs
    rules = ('rule nhwc: conv2d(x, w, padding=p) => to_layout(conv2d(to_layout(x, "NHWC"), w,'
             ' padding=p), "NCHW")\n    where layout(x) == "NCHW"\n'
             'rule seen: conv2d(y, w, padding=p) => conv2d(y, w, padding=p)\n'
             '    where layout(y) == "NHWC" and dim(y, 1) == 8 and rank(y) == 4\n')
    out = cuvil.optimize(_conv_graph(8), rules=rules, verify=False)
    assert out.report.rules["nhwc"].matches > 0
    assert out.report.rules["seen"].matches > 0


def test_type_changing_rule_is_rejected():
    rules = 'rule bad: relu(x) => to_layout(relu(x), "NHWC")\n    where rank(x) == 4\n'
    graph = _conv_graph(8)
    out = cuvil.optimize(graph, rules=rules, verify=False)
    assert any("bad" in chain and "layout NCHW -> NHWC" in why
               for chain, why in out.report.rejected)
    assert "to_layout" not in out.ops()
    x = torch.randn(2, 8, 8, 8)
    torch.testing.assert_close(cuvil.run(out, x), cuvil.run(graph, x))


def test_ill_typed_right_hand_side_is_rejected():
    g = Graph("mm")
    x = g.input("x", TensorType((3, 5), "f32"))
    w = g.const(torch.randn(5, 7), ref="w")
    g.set_outputs(g.add("matmul", [x, w]))
    out = cuvil.optimize(g, rules="rule swap: matmul(a, b) => matmul(b, a)\n",
                         verify=False)
    assert any("cannot be typed" in why for _, why in out.report.rejected)
    assert out.ops() == ["matmul"] and out[out.outputs[0]].inputs[0] == "x"


def test_constant_subterms_fold_into_new_constants():
    g = Graph("fold")
    x = g.input("x", TensorType((4, 3), "f32"))
    w = g.const(torch.randn(3, 5), ref="w")
    scaled = g.add("mul", [w, g.scalar(2.0)])  # constant: folded at compile time
    g.set_outputs(g.add("matmul", [x, scaled]))
    out = cuvil.optimize(g, rules="rule noop: relu(x) => relu(x)\n")
    assert out.ops() == ["matmul"]
    folded = [n for n in out if n.op == "const" and n.attrs["ref"].startswith("~fold")]
    assert folded and folded[0].origin[0] == "fold"
    xs = torch.randn(4, 3)
    torch.testing.assert_close(cuvil.run(out, xs), cuvil.run(g, xs))


def test_is_const_and_value_guards():
    g = Graph("k")
    x = g.input("x", TensorType((4,), "f32"))
    g.set_outputs(g.add("mul", [x, g.scalar(1.0)]))
    rules = "rule one: mul(x, c) => x\n    where is_const(c) and value(c) == 1.0\n"
    out = cuvil.optimize(g, rules=rules, verify=False)
    assert out.ops() == [] and out.report.rules["one"].in_result
    rules2 = "rule one: mul(x, c) => x\n    where is_const(c) and value(c) == 2.0\n"
    assert cuvil.optimize(g, rules=rules2, verify=False).ops() == ["mul"]


@pytest.mark.parametrize("bad", ["rule r: relu(x) => relu(x)\n    where dim(x, 1) > \"a\"\n"])
def test_bad_guards_are_rule_errors(bad):
    with pytest.raises(cuvil.CuvilError):
        cuvil.optimize(_conv_graph(8), rules=bad)
