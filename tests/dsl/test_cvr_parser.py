"""The `.cvr` parser: the reference example's AST, literals, positions, descriptions and
rulesets, and syntax errors (all of them, each at its line and column)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuvil.dsl import CvrError, ast, parse
from cuvil.dsl.parser import parse_module
from cuvil.errors import CuvilError

REFERENCE = Path(__file__).resolve().parents[1] / "cvr" / "pass" / "reference.cvr"


@pytest.fixture(scope="module")
def reference() -> ast.Module:
    return parse(REFERENCE.read_text(), path="reference.cvr")


def rules_of(module: ast.Module) -> dict[str, ast.Rule]:
    return {i.name: i for i in module.items if isinstance(i, ast.Rule)}


def test_reference_items_in_order(reference):
    kinds = [type(i).__name__ for i in reference.items]
    assert kinds == ["RulesetDecl", "OpDecl", "OpDecl", "Rule", "Rule", "RulesetDecl", "Rule",
                     "Rule", "Rule", "RulesetDecl", "Rule", "Rule", "Rule", "RulesetDecl",
                     "Rule", "TargetDecl", "CostDecl", "Schedule"]


def test_reference_rules_know_ruleset_description_and_place(reference):
    rules = rules_of(reference)
    assert {n: r.ruleset for n, r in rules.items()} == {
        "matmul_add": "fusion", "linear_relu": "fusion", "mul_one": "algebra",
        "transpose_twice": "algebra", "add_comm": "algebra", "conv_nhwc": "layout",
        "layout_roundtrip": "layout", "layout_noop": "layout", "matmul_on_cuda": "placement"}
    assert rules["matmul_add"].description.startswith("x @ w + b  ==  linear(x, w, b)")
    assert rules["layout_roundtrip"].description == ""  # no comment right above it
    assert rules["matmul_add"].pos == ast.Pos("reference.cvr", 9, 6)
    assert rules["add_comm"].bidirectional and not rules["mul_one"].bidirectional


def test_reference_terms_and_guards(reference):
    rule = rules_of(reference)["matmul_add"]
    assert _shape(rule.lhs) == ("add", ("matmul", "x", "w"), "b")
    assert _shape(rule.rhs) == ("linear", "x", "w", "b")
    guard = rule.guard
    assert isinstance(guard, ast.BinOp) and guard.op == "and"
    last = guard.right
    assert _shape(last) == ("==", ("dim", "b", 0), ("dim", "w", -1))  # -1 is one literal
    conv = rules_of(reference)["conv_nhwc"]
    assert [k for k, _ in conv.lhs.kwargs] == ["stride", "padding", "dilation", "groups"]
    assert _shape(conv.rhs.args[0].args[0]) == ("to_layout", "x", "NHWC")


def test_reference_declarations(reference):
    target, cost, schedule = reference.items[-3:]
    assert target.name == "cpu" and dict(target.params) == {"gflops": 150, "gbps": 20,
                                                           "launch_us": 2}
    assert cost.op == "linear" and cost.params == ("x", "w", "b")
    assert isinstance(cost.expr.right, ast.TargetParam) and cost.expr.right.name == "launch_us"
    assert [(type(s).__name__, getattr(s, "times", None), s.rulesets) for s in schedule.steps] \
        == [("Saturate", None, ("algebra",)), ("Repeat", 8, ("fusion", "layout", "placement"))]
    op = reference.items[1]
    assert op.name == "linear" and op.params == ("x", "w", "b")
    assert op.description.startswith("A fused op is defined by what it computes")
    assert op.kernel == "gemm" and (op.kernel_pos.line, op.kernel_pos.col) == (5, 50)


def test_an_op_without_a_kernel_clause_names_no_family():
    text = "op lin(x, w, b) = add(matmul(x, w), b)\nop f(x, kernel_size) = relu(x)\n"
    first, second = parse(text).items
    assert (first.kernel, first.kernel_pos) == ("", None)
    assert second.params == ("x", "kernel_size")  # `kernel` alone is the reserved word


def _shape(node):
    """A term or expression as nested tuples of op names, variable names and values."""
    match node:
        case ast.Call(op=op, args=args, kwargs=kwargs):
            return (op, *map(_shape, args), *(_shape(v) for _, v in kwargs))
        case ast.Builtin(name=name, args=args):
            return (name, *map(_shape, args))
        case ast.BinOp(op=op, left=left, right=right):
            return (op, _shape(left), _shape(right))
        case ast.Var(name=name):
            return name
        case ast.Literal(value=value):
            return value
    return type(node).__name__


@pytest.mark.parametrize("text, value", [
    ("1", 1), ("-3", -3), ("2.5", 2.5), ("1e3", 1000.0), (".5", 0.5), ("1.", 1.0),
    ('"NHWC"', "NHWC"), ("'a\\'b'", "a'b"), ("True", True), ("true", True),
    ("False", False), ("false", False), ("None", None), ("()", ()), ("(1,)", (1,)),
    ("(1, -2)", (1, -2)), ("(1, 2,)", (1, 2)), ('("a", 1.5)', ("a", 1.5)),
])
def test_literals(text, value):
    rule = parse(f"rule r: f(x, k={text}) => x\n").items[0]
    literal = rule.lhs.kwargs[0][1]
    assert isinstance(literal, ast.Literal)
    assert literal.value == value and type(literal.value) is type(value)


def test_wildcard_where_op_and_a_rule_spanning_lines():
    text = ("rule w: where(_, x, x)\n"
            "=> x\n"
            "    where rank(x) > 0 and\n"
            "          not is_const(x)\n")
    rule = parse(text).items[0]
    assert isinstance(rule.lhs.args[0], ast.Wildcard)
    assert rule.lhs.op == "where" and isinstance(rule.guard, ast.BinOp)
    assert isinstance(rule.guard.right, ast.Not)


def test_rules_before_a_ruleset_line_take_the_file_stem():
    text = "rule a: relu(x) => x\nruleset later\nrule b: neg(x) => x\n"
    module = parse(text, path="rules/algebra/basics.cvr")
    assert [i.ruleset for i in module.items if isinstance(i, ast.Rule)] == ["basics", "later"]
    assert parse(text).items[0].ruleset == "default"  # source text has no file stem


def test_description_is_the_comment_block_right_above():
    text = "# unrelated\n\n# first line\n# second line\nrule a: relu(x) => x\n"
    assert parse(text).items[0].description == "first line second line"


def test_every_syntax_error_of_a_file_is_reported_at_its_place():
    text = ("rule ok1: relu(x) => x\n"
            "rule bad1: relu(x) relu(x)\n"
            "op bad2(x) = \n"
            "rule ok2: neg(x) => x\n"
            "schedule: loop(a)\n")
    module, diagnostics = parse_module(text, "f.cvr")
    assert [d.pos.line for d in diagnostics] == [2, 3, 5]
    assert diagnostics[0].pos.col == 20 and "unexpected 'relu'" in diagnostics[0].message
    assert "expected a term" in diagnostics[1].message
    assert "unknown schedule step 'loop'" in diagnostics[2].message
    assert [i.name for i in module.items] == ["ok1", "ok2"]  # the good items still parse
    with pytest.raises(CvrError) as info:
        parse(text, path="f.cvr")
    assert len(info.value.errors) == 3
    assert str(info.value).splitlines()[0].startswith("f.cvr:2:20: error: syntax error")


def test_error_rendering_has_a_caret_under_the_spot():
    with pytest.raises(CvrError) as info:
        parse("rule r: relu(x) => x where rank(x) >\n", path="g.cvr")
    lines = str(info.value).splitlines()
    assert lines[0] == ("g.cvr:1:37: error: syntax error: unexpected end of the item, "
                        "expected an expression")
    assert lines[1] == "    rule r: relu(x) => x where rank(x) >"
    assert lines[2].index("^") == lines[1].rindex(">") + 1
    assert isinstance(info.value, CuvilError)


@pytest.mark.parametrize("text, message", [
    ("rule r: f(k=1, x) => x", "positional argument after a keyword argument"),
    ("rule r: f(x) => g(x) where shape(x) == (1, n)", "tuple elements must be literals"),
    ('rule r: f("\\q") => x', "bad string literal"),
    ("target t(a=1, a=2)", "target parameter 'a' given twice"),
    ("schedule: repeat(a, b)", "repeat(...) takes a count, then ruleset names"),
    ("schedule: saturate(2)", "saturate(...) takes ruleset names only"),
    ("rule rule: x => y", "syntax error: unexpected 'rule'"),
    ("rule r: " + "relu(" * 150 + "x" + ")" * 150 + " => x", "nested too deeply"),
])
def test_problems_the_grammar_cannot_express(text, message):
    with pytest.raises(CvrError) as info:
        parse(text + "\n")
    assert message in str(info.value)
