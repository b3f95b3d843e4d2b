"""The `.cvr` checker: the normal form of checked terms, `<=>` halves, guard and cost typing,
names, and that every problem of a file is reported without follow-on noise."""

from __future__ import annotations

import pytest

from cuvil.dsl import CvrError, ast
from cuvil.library import load
from cuvil.ops import get


def errors_of(text: str) -> list[str]:
    with pytest.raises(CvrError) as info:
        load(text)
    return [f"{d.pos.line}: {d.message}" for d in info.value.errors]


def show(term) -> str:
    """A normal-form term as text: every attribute spelled out, scalars with their dtype."""
    match term:
        case ast.Call(op=op, args=args, kwargs=kwargs):
            parts = [show(a) for a in args] + [f"{k}={show(v)}" for k, v in kwargs]
            return f"{op}({', '.join(parts)})"
        case ast.Var(name=name):
            return name
        case ast.Literal(value=value):
            return repr(value)
    return "_"


def test_normal_form_fills_every_attribute_in_signature_order():
    library = load("rule t: transpose(transpose(x, a, b), a, b) => x\n"
                   "rule c: conv2d(x, w, groups=1, stride=s) => conv2d(x, w, stride=s)\n")
    t, c = library.rules
    assert show(t.lhs) == "transpose(transpose(x, dim0=a, dim1=b), dim0=a, dim1=b)"
    names = [spec.name for spec in get("conv2d").attrs]
    assert [k for k, _ in c.lhs.kwargs] == names  # catalog order, whatever the source order
    assert show(c.lhs) == "conv2d(x, w, stride=s, padding=(0, 0), dilation=(1, 1), groups=1)"
    assert show(c.rhs) == "conv2d(x, w, stride=s, padding=(0, 0), dilation=(1, 1), groups=1)"


def test_numbers_in_tensor_positions_become_typed_scalars():
    library = load("rule a: add(x, 2) => x\nrule m: mul(x, 1.0) => x\n"
                   "rule w: where(True, x, _) => x\nrule c: cat(x, y, z) => cat(x, cat(y, z))\n")
    a, m, w, c = library.rules
    assert show(a.lhs) == "add(x, scalar(value=2, dtype='i64'))"
    assert show(m.lhs) == "mul(x, scalar(value=1.0, dtype='f32'))"
    assert show(w.lhs) == "where(scalar(value=True, dtype='bool'), x, _)"
    assert show(c.lhs) == "cat(x, y, z, dim=0)"  # variadic: every positional is a tensor


def test_a_bidirectional_rule_is_two_checked_rules():
    library = load("ruleset algebra\nrule add_comm: add(x, y) <=> add(y, x)\n")
    forward, backward = library.rules
    assert (forward.label, backward.label) == ("add_comm", "add_comm~rev")
    assert (forward.lhs, forward.rhs) == (backward.rhs, backward.lhs)
    assert library.rulesets == {"algebra": ("add_comm",)}
    assert forward.where == "<string>:2"


def test_every_problem_of_a_file_is_reported_once():
    text = ("rule a: relu(x) => y\n"           # unbound
            "rule b: relux(x, k=1) => x\n"     # unknown op: no follow-on 'x unbound'
            "op f(x) = relu(g(x))\n"           # unknown op g ...
            "rule c: f(x) => x\n"              # ... so f is broken: not reported again
            "rule d: neg(x) => x where rank(x)\n"
            "rule a: neg(x) => x\n")           # duplicate
    assert errors_of(text) == [
        "1: variable 'y' is not bound by the left-hand side",
        "2: unknown op 'relux' (did you mean 'relu'?)",
        "3: unknown op 'g' (did you mean 'gt'?)",
        "5: a guard must be a boolean, got int",
        "6: duplicate rule 'a' (first defined at <string>:1:6); to replace it, write "
        "`override rule a`",
    ]


GUARDED = "rule r: conv2d(x, w, stride=s, padding=p, dilation=d, groups=g) => x\n    where {}\n"


@pytest.mark.parametrize("guard", [
    "rank(x) == 4 and dim(x, 1) % g == 0",
    'layout(x) != "NHWC" or not is_float(w)',
    "shape(w) == (8, 3, 3, 3) and s == (1, 1) and p == (0, 0)",
    "numel(x) / 2 > 1.5 and numel(w) * 4 >= 4 * numel(w) - 1",
    "dim(x, 2) * dim(x, -1) <= 224 * 224 and -g < 0 and (dim(w, 0) + 1) % 2 == 1",
    'has_target("cuda") and dtype(x) == dtype(w) and device(x) == "cpu"',
    "is_const(w) and value(w) != 0 and true",
])
def test_well_typed_guards(guard):
    assert load(GUARDED.format(guard)).rules[0].guard is not None


@pytest.mark.parametrize("guard, message", [
    ("dtype(x) > 3", "'>' needs numbers on both sides, got str and int"),
    ("rank(x)", "a guard must be a boolean, got int"),
    ("layout(x) == 4", "cannot compare str with int using '=='"),
    ("p == 0", "cannot compare tuple with int using '=='"),  # an `ints` attribute: a tuple
    ("is_float(x) == 1", "cannot compare bool with int using '=='"),
    ("rank(x) == 4 and 1", "'and' needs booleans on both sides, got bool and int"),
    ("not rank(x)", "'not' needs a boolean, got int"),
    ("-layout(x) == 1", "'-' needs a number, got str"),
    ("shape(x) < (1, 2)", "'<' needs numbers on both sides, got tuple and tuple"),
    ("dim(x) == 1", "dim() takes 2 argument(s), got 1"),
    ("rank(g) == 1", "rank() takes a tensor variable"),
    ("has_target(cuda)", "has_target() needs a string literal here"),
    ("dim(x, g) == 1", "dim() needs an integer literal here"),
    ("bytes(x) > 1", "bytes() is only available in cost expressions"),
    ("max(rank(x), 1) > 1", "max() is only available in cost expressions"),
    ("rank(x) % 2.0 == 0", "'%' needs integers in a guard, got int and float"),
    ("x == 1", "'x' is a tensor: use it through a built-in"),
    ("target.gflops > 1", "only available in cost expressions"),
    ("rnak(x) == 4", "unknown built-in 'rnak' in a guard (did you mean 'rank'?)"),
])
def test_ill_typed_guards(guard, message):
    (error,) = errors_of(GUARDED.format(guard))
    assert error.startswith("2: ") and message in error


def test_cost_parameters_are_tensor_inputs_then_attributes():
    text = ("target cpu(gflops=100, gbps=10, launch_us=1)\n"
            "cost transpose(x, a, b) = max(bytes(x), numel(x)) * (a != b) / target.gbps\n")
    library = load(text)
    assert library.costs["transpose"].params == ("x", "a", "b")
    assert errors_of(text.replace("(x, a, b)", "(x, a, b, c)")) == [
        "2: cost for 'transpose' has 4 parameters, but the op takes 3"]
    assert errors_of(text.replace("max(bytes(x), numel(x))", "layout(x)")) == [
        "2: '*' needs numbers on both sides, got str and bool"]
    assert errors_of(text.replace("bytes(x)", "value(x)")) == [
        "2: value() is only available in guards"]


def test_names_have_one_namespace_per_kind():
    text = ("ruleset linear\n"
            "op linear(x, w, b) = add(matmul(x, w), b)\n"
            "rule linear: add(matmul(x, w), b) => linear(x, w, b)\n"
            "target linear(gflops=1)\n")
    library = load(text)
    assert list(library.ops) == ["linear"] and library.rule("linear").ruleset == "linear"
    assert "linear" in library.targets


def test_identical_rules_warn_but_load():
    text = ("rule a: relu(relu(x)) => relu(x)\n"
            "rule b: relu(relu(y)) => relu(y)\n"         # same rule, renamed variable
            "rule c: relu(relu(x)) => relu(x) where rank(x) == 2\n")  # differs: a guard
    library = load(text)
    assert len(library.rules) == 3
    (warning,) = library.warnings
    assert warning.startswith("<string>:2:6: warning: rule 'b' is shadowed by the identical "
                              "rule 'a' at <string>:1:6")


@pytest.mark.parametrize("text, message", [
    ('rule m: to_device(x, "cuda") => to_device(x, "cpu")', "differ in device: cuda vs cpu"),
    ('rule c: cast(x, "f16") => eq(x, x)', "differ in dtype: f16 vs bool"),
    ('rule l: to_layout(x, "NHWC") => to_layout(x, "NCHW")', "differ in layout: NHWC vs NCHW"),
])
def test_sides_that_differ_by_type_statically(text, message):
    (error,) = errors_of(text + "\n")
    assert message in error


def test_sides_whose_types_depend_on_the_match_are_accepted():
    assert load('rule l: to_layout(x, "NHWC") => x where layout(x) == "NHWC"\n').rules


@pytest.mark.parametrize("text", [
    "op e(x) = relu(add(x, 1.0)) kernel elementwise",
    "op g(x, w, b, r) = add(gelu(add(matmul(x, w), b)), r) kernel gemm",
    "op c(x, w, k) = max_pool2d(relu(conv2d(x, w)), kernel_size=k) kernel conv",
    "op m(x, w1, w2) = matmul(relu(matmul(x, w1)), w2) kernel mlp",
    "op a(q, k, v) = matmul(softmax(matmul(q, transpose(k, -2, -1)), dim=-1), v) kernel attention",
])
def test_bodies_their_kernel_family_computes(text):
    assert load(text + "\n").ops


@pytest.mark.parametrize("text, message", [
    ("op e(x, w) = matmul(x, w) kernel elementwise",
     "1: op 'e': kernel elementwise (an elementwise DAG of one shape, one loop) has no place "
     "for matmul"),
    ("op g(x, w) = matmul(relu(matmul(x, w)), w) kernel gemm",
     "1: op 'g': kernel gemm takes 1 matmul call(s), the body has 2"),
    ("op m(x, w) = relu(matmul(x, w)) kernel mlp",
     "1: op 'm': kernel mlp takes 2 to 3 matmul call(s), the body has 1"),
    ("op c(x, w, k) = relu(max_pool2d(conv2d(x, w), kernel_size=k)) kernel conv",
     "1: op 'c': kernel conv (one convolution with an elementwise epilogue, then a max pool "
     "or not) has no place for max_pool2d"),
    ("op q(x, w) = add(matmul(x, w), 1.0) kernel gemmm",
     "1: op 'q': unknown kernel family 'gemmm' (did you mean 'gemm'?)"),
])
def test_a_kernel_family_that_does_not_compute_the_body_is_refused(text, message):
    assert errors_of(text + "\n") == [message]
