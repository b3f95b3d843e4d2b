"""Checked `.cvr` rules compiled to egglog rules, each tagged with its `path:line`.

    ; rules/fusion.cvr:9  matmul_add
    (rule ((= _n0 (Add _n1 v_b)) (= _n1 (Matmul v_x v_w)) ... guard atoms ...
           (= _o0 (org_Add _n1 v_b)) (= _o1 (org_Matmul v_x v_w)))
          ((let _r0 (Linear v_x v_w v_b))
           (set (org_Linear v_x v_w v_b) (+ " <- matmul_add" _o0 _o1))
           (union _n0 _r0))
          :ruleset matmul_add :name "matmul_add")

Every e-node carries an origin string (` <- rule <- rule ...`): the rule that made it
followed by the origins of the nodes its left-hand side matched. That is the provenance
`explain` prints; egglog's bindings expose no proofs, so Cuvil records it itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cuvil.dsl import ast
from cuvil.egraph.guards import TENSOR, GuardCompiler
from cuvil.egraph.schema import F64, I64, attr_sort, ctor, encode_attr, encode_string
from cuvil.errors import CuvilError
from cuvil.library.checked import CheckedRule
from cuvil.ops import registry


@dataclass
class EggRule:
    label: str  # the rule's report name (`add_comm`, `add_comm~rev`, `unfold:linear`)
    where: str  # path:line
    ruleset: str  # the egglog ruleset holding this rule alone
    text: str
    uses: set[str] = field(default_factory=set)
    dims: set[int] = field(default_factory=set)


@dataclass
class _Pattern:
    """Accumulates query atoms while walking a left-hand side."""

    defs: dict
    where: str
    atoms: list[str] = field(default_factory=list)
    origins: list[str] = field(default_factory=list)
    computed: list[str] = field(default_factory=list)  # atoms for RHS attributes like value(e)
    guards: GuardCompiler | None = None
    variables: dict[str, str] = field(default_factory=dict)
    count: int = 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def bind(self, name: str, sort: str, pos: ast.Pos) -> str:
        known = self.variables.setdefault(name, sort)
        if known != sort:
            raise CuvilError(f"{pos}: error: '{name}' is used as both {known} and {sort}")
        return f"v_{name}"

    def term(self, t: ast.Term) -> str:
        match t:
            case ast.Var(name=name, pos=pos):
                return self.bind(name, TENSOR, pos)
            case ast.Wildcard():
                return self.fresh("_w")
            case ast.Call():
                args = self.args(t)
                var = self.fresh("_n")
                self.atoms.append(f"(= {var} {args})")
                org = self.fresh("_o")
                self.origins.append(org)
                self.atoms.append(f"(= {org} (org_{args[1:]})")
                return var
        raise CuvilError(f"{t.pos}: error: a number cannot stand for a tensor here")

    def args(self, call: ast.Call) -> str:
        opdef = registry.get(call.op, self.defs)
        parts = [self.term(a) for a in call.args]
        for name, value in call.kwargs:
            kind = opdef.attr_spec(name).kind
            parts.append(self.attr(value, kind))
        return f"({ctor(opdef, len(call.args))} {' '.join(parts)})".replace(" )", ")")

    def attr(self, value: ast.Term, kind: str) -> str:
        match value:
            case ast.Literal(value=v):
                return encode_attr(v, kind)
            case ast.Var(name=name, pos=pos):
                return self.bind(name, attr_sort(kind), pos)
            case ast.Wildcard():
                return self.fresh("_w")
        raise CuvilError(f"{value.pos}: error: an attribute must be a literal or a variable")


def _build(term: ast.Term, pattern: _Pattern, label: str, actions: list[str], origin: str) -> str:
    """Actions that build `term`; returns the expression naming it."""
    match term:
        case ast.Var(name=name):
            return f"v_{name}"
        case ast.Call():
            opdef = registry.get(term.op, pattern.defs)
            parts = [_build(a, pattern, label, actions, origin) for a in term.args]
            parts += [_rhs_attr(v, opdef.attr_spec(k).kind, pattern) for k, v in term.kwargs]
            name = ctor(opdef, len(term.args))
            app = f"({name} {' '.join(parts)})".replace(" )", ")")
            var = pattern.fresh("_r")
            actions.append(f"(let {var} {app})")
            actions.append(f"(set (org_{app[1:]} {origin})")
            return var
    raise CuvilError(f"{term.pos}: error: cannot build this term")


def _rhs_attr(value, kind: str, pattern: _Pattern) -> str:
    if isinstance(value, ast.Literal):
        return encode_attr(value.value, kind)
    if isinstance(value, ast.Var) and value.name in pattern.variables:
        return f"v_{value.name}"
    if isinstance(value, ast.Builtin) and pattern.guards is not None:
        # computed from the match, e.g. `eps=value(e)`: looked up in the query, so an
        # unknown value (a non-scalar `e`) means no match
        text, sort, atoms = pattern.guards.value(value)
        want = attr_sort(kind)
        if (sort, want) == (I64, F64):
            text, sort = f"(to-f64 {text})", F64
        if sort != want:
            raise CuvilError(f"{value.pos}: error: {value.name}(...) gives a {sort} where "
                             f"the attribute needs a {want}")
        pattern.computed += atoms
        return text
    raise CuvilError(f"{value.pos}: error: attribute must be a literal, a bound variable or "
                     "a built-in over matched values")


def compile_rule(rule: CheckedRule, ruleset: str, defs: dict, targets: tuple[str, ...]
                 ) -> list[EggRule]:
    """One egglog rule per alternative of the guard (`or` splits)."""
    where = rule.where
    pattern = _Pattern(defs, where)
    root = pattern.term(rule.lhs)
    guards = GuardCompiler(dict(pattern.variables), targets, where)
    alternatives = guards.compile(rule.guard)
    pattern.guards = guards
    origin = f"(+ {encode_string(' <- ' + rule.label)} {' '.join(pattern.origins)})"
    actions: list[str] = []
    rhs = _build(rule.rhs, pattern, rule.label, actions, origin)
    actions.append(f"(union {root} {rhs})")
    # where each rule fired: a removal is reported as in the result when its class is;
    # a rewrite that merged two imported nodes' classes is named when explaining them
    relation = "fired" if isinstance(rule.rhs, ast.Var) else "rewrote"
    actions.append(f"({relation} {root} {encode_string(rule.label)})")
    out = []
    for k, extra in enumerate(alternatives):
        query = " ".join(dict.fromkeys(pattern.atoms + extra + pattern.computed))
        text = (f"; {where}  {rule.label}\n(rule ({query})\n      ({' '.join(actions)})\n"
                f"      :ruleset {ruleset} :name {encode_string(_egg_name(rule.label, k))})")
        out.append(EggRule(rule.label, where, ruleset, text, guards.used, guards.dims))
    return out


def _egg_name(label: str, alternative: int) -> str:
    return label if alternative == 0 else f"{label}|{alternative}"


def label_of(egg_name: str) -> str:
    """The rule label behind an egglog rule name (guards with `or` make several)."""
    return egg_name.split("|", 1)[0]


def unfold_rule(opdef, ruleset: str, defs: dict) -> EggRule:
    """`op NAME(params) = BODY` read left to right: the op may be replaced by its body."""
    decl: ast.OpDecl = opdef.body
    pos = decl.pos
    params = [ast.Var(p, pos) for p in decl.params]
    n_in = len(opdef.inputs)
    lhs = ast.Call(decl.name, tuple(params[:n_in]),
                   tuple((a.name, params[n_in + i]) for i, a in enumerate(opdef.attrs)), pos)
    label = f"unfold:{decl.name}"
    pattern = _Pattern(defs, pos.where)
    root = pattern.term(lhs)
    actions: list[str] = []
    rhs = _build(decl.body, pattern, label, actions, pattern.origins[0])
    actions.append(f"(union {root} {rhs})")
    text = (f"; {pos.where}  {label}\n(rule ({' '.join(pattern.atoms)})\n"
            f"      ({' '.join(actions)})\n      :ruleset {ruleset} :name {encode_string(label)})")
    return EggRule(label, pos.where, ruleset, text)
