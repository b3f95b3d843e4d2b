"""The semantic checker: parsed `.cvr` modules in, a `RuleLibrary` and diagnostics out.

Names live in one namespace per kind (op, rule, ruleset, target); a ruleset may be reopened
anywhere. Ops are checked first, in dependency order, and become composite `OpDef`s; then
rules (terms against the op signatures, variable binding, guard types), costs and the
schedule. Every problem is reported, with both places for a duplicate name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING

from cuvil.dsl import ast, kernels
from cuvil.dsl.builtins import ROOFLINE_PARAMS
from cuvil.dsl.diagnostics import NOTE, Reporter
from cuvil.dsl.expressions import ANY, ATTR_TYPES, BOOL, NUMBER, TENSOR, UNKNOWN, ExprTyper
from cuvil.dsl.normalize import normalize, suggest
from cuvil.dsl.signatures import Catalog, Signature, catalog
from cuvil.dsl.terms import BODY, BOTH, BROKEN, LHS, RHS, TermChecker, VarInfo
from cuvil.library.checked import CheckedRule, RuleLibrary

if TYPE_CHECKING:
    from cuvil.ops.registry import OpDef


def check_modules(modules: list[ast.Module], reporter: Reporter,
                  ops: Catalog | None = None) -> RuleLibrary:
    """Check `modules` as one set of rules against the op catalog `ops` (default: the live
    one; a snapshot makes composite ops `Signature`s); problems go to `reporter`."""
    return _Checker(reporter, ops or catalog()).run(modules)


class _Checker:
    def __init__(self, reporter: Reporter, ops: Catalog):
        self.reporter, self.catalog = reporter, ops
        self.decls: dict[str, ast.OpDecl] = {}
        self.rules: list[ast.Rule] = []
        self.rulesets: dict[str, list[str]] = {}
        self.targets: dict[str, ast.TargetDecl] = {}
        self.costs: dict[str, ast.CostDecl] = {}
        self.schedule: ast.Schedule | None = None
        self.defs: dict[str, OpDef | Signature] = {}
        self.broken: set[str] = set()
        self.terms = TermChecker(reporter, self.lookup, self.op_names)

    def run(self, modules: list[ast.Module]) -> RuleLibrary:
        for module in modules:
            for item in module.items:
                self.collect(item)
        for name in self.ops_in_dependency_order():
            self.define_op(self.decls[name])
        checked = [half for rule in self.rules for half in self.check_rule(rule)]
        self.warn_shadowed(checked)
        for cost in self.costs.values():
            self.check_cost(cost)
        if self.schedule:
            self.check_schedule(self.schedule)
        return RuleLibrary(
            rules=tuple(checked), ops={n: self.defs[n] for n in self.decls if n in self.defs},
            rulesets={k: tuple(v) for k, v in self.rulesets.items()}, targets=self.targets,
            costs=self.costs, schedule=self.schedule, files=tuple(m.path for m in modules))

    # -- names ----------------------------------------------------------------------------------
    def lookup(self, name: str) -> object:
        if name in self.broken:
            return BROKEN
        if name in self.defs:
            return self.defs[name]
        return self.catalog.get(name)

    def op_names(self) -> list[str]:
        return [*self.catalog.all_ops(), *self.decls]

    def duplicate(self, kind: str, item, first) -> None:
        name = getattr(item, "name", None) or getattr(item, "op", "")
        note = self.reporter.make(first.pos, f"'{name}' is first defined here", NOTE)
        self.reporter.error(item.pos, f"duplicate {kind} '{name}'", (note,))

    def collect(self, item: ast.Item) -> None:
        match item:
            case ast.OpDecl() if self.catalog.exists(item.name):
                self.reporter.error(item.pos, f"op '{item.name}' is already an op of the "
                                              f"catalog; choose another name")
            case ast.OpDecl() if item.name in self.decls:
                self.duplicate("op", item, self.decls[item.name])
            case ast.OpDecl():
                self.decls[item.name] = item
            case ast.Rule():
                self.collect_rule(item)
            case ast.RulesetDecl():
                self.rulesets.setdefault(item.name, [])
            case ast.TargetDecl() if item.name in self.targets:
                self.duplicate("target", item, self.targets[item.name])
            case ast.TargetDecl():
                self.targets[item.name] = item
            case ast.CostDecl() if item.op in self.costs:
                self.duplicate("cost for op", item, self.costs[item.op])
            case ast.CostDecl():
                self.costs[item.op] = item
            case ast.Schedule() if self.schedule:
                note = self.reporter.make(self.schedule.pos, "the first schedule", NOTE)
                self.reporter.error(item.pos, "a second schedule: rules loaded together have "
                                              "at most one", (note,))
            case ast.Schedule():
                self.schedule = item
            case ast.Include():  # its file was read before this one (cuvil/dsl/sources.py)
                pass

    def collect_rule(self, item: ast.Rule) -> None:
        """A rule; `override rule` takes the place (ruleset, turn) of the one it names."""
        self.rulesets.setdefault(item.ruleset, [])
        first = next((r for r in self.rules if r.name == item.name), None)
        if first and item.override:
            item = dataclasses.replace(item, ruleset=first.ruleset)
            self.rules[self.rules.index(first)] = item
        elif first:
            self.reporter.error(item.pos, f"duplicate rule '{item.name}' (first defined at "
                                          f"{first.pos}); to replace it, write `override rule "
                                          f"{item.name}`")
        elif item.override:
            self.reporter.error(item.pos, f"override rule '{item.name}' replaces no rule: none "
                                          f"of that name is loaded before it (load the library "
                                          f"it overrides first: rules=[\"stock\", ...])")
        else:
            self.rules.append(item)
            self.rulesets[item.ruleset].append(item.name)

    # -- ops ------------------------------------------------------------------------------------
    def ops_in_dependency_order(self) -> list[str]:
        """Op names, each after the ops its body uses; ops on a cycle are reported."""
        order: list[str] = []
        state: dict[str, str] = {}

        def visit(name: str, path: list[str]) -> None:
            if state.get(name) == "done":
                return
            if state.get(name) == "active":
                self.report_cycle(path[path.index(name):] + [name])
                return
            state[name] = "active"
            for call in _calls(self.decls[name].body):
                if call.op in self.decls:
                    visit(call.op, [*path, name])
            state[name] = "done"
            order.append(name)

        for name in self.decls:
            visit(name, [])
        return [n for n in order if n not in self.broken]

    def report_cycle(self, cycle: list[str]) -> None:
        if self.broken & set(cycle):
            return
        self.broken.update(cycle)
        last, first = self.decls[cycle[-2]], cycle[-1]
        call = next(c for c in _calls(last.body) if c.op == first)
        self.reporter.error(call.pos, f"recursive op definition: {' -> '.join(cycle)}")

    def define_op(self, decl: ast.OpDecl) -> None:
        mark = len(self.reporter.diagnostics)
        for i, param in enumerate(decl.params):
            if param in decl.params[:i]:
                self.reporter.error(decl.pos, f"parameter '{param}' of op '{decl.name}' "
                                              f"appears twice")
        env: dict[str, VarInfo] = {}
        if isinstance(decl.body, ast.Call):
            self.terms.check(decl.body, BODY, env, decl.params)
        else:
            self.reporter.error(decl.body.pos, f"the body of op '{decl.name}' must be an op "
                                               f"call")
        for param in decl.params:
            if param not in env and isinstance(decl.body, ast.Call):
                self.reporter.error(decl.pos, f"parameter '{param}' of op '{decl.name}' is "
                                              f"not used in its body")
        kinds = [env[p].is_tensor for p in decl.params if p in env]
        if kinds != sorted(kinds, reverse=True):
            self.reporter.error(decl.pos, f"op '{decl.name}': tensor parameters must come "
                                          f"before attribute parameters")
        if not self.errors_since(mark) and not self.terms.hit_broken:
            self.check_kernel(decl)
        if self.errors_since(mark) or self.terms.hit_broken:
            self.broken.add(decl.name)
            return
        unique = tuple(dict.fromkeys(decl.params))
        inputs = tuple(p for p in unique if env[p].is_tensor)
        attrs = tuple(self.catalog.attr(p, env[p].attr_kind) for p in unique
                      if not env[p].is_tensor)
        body = normalize(decl.body, self.lookup)
        if not self.catalog.live:  # a check alone: the signature is all that is needed
            self.defs[decl.name] = Signature(decl.name, inputs, attrs, kind="composite")
            return
        from cuvil.library.composite import composite_opdef  # torch: only for a usable library

        self.defs[decl.name] = composite_opdef(dataclasses.replace(decl, body=body), inputs,
                                               attrs, self.defs)

    def check_kernel(self, decl: ast.OpDecl) -> None:
        """The family of the op's `kernel` clause exists and computes a body of this shape."""
        if not decl.kernel:
            return
        kernel = kernels.family(decl.kernel)
        if kernel is None:
            self.reporter.error(decl.kernel_pos, f"op '{decl.name}': unknown kernel family "
                                                 f"'{decl.kernel}'"
                                                 f"{suggest(decl.kernel, kernels.FAMILIES)}")
            return
        misfit = kernels.body_misfit(kernel, self.body_ops(decl.body))
        if misfit:
            self.reporter.error(decl.kernel_pos, f"op '{decl.name}': {misfit}")

    def body_ops(self, term: ast.Term) -> list[tuple[str, str]]:
        """(op, kernel family) of each catalog call of a body, arguments first, the bodies
        of the composite ops it calls expanded."""
        if not isinstance(term, ast.Call):
            return []
        inner = [op for arg in term.args for op in self.body_ops(arg)]
        if term.op in self.decls:
            return inner + self.body_ops(self.decls[term.op].body)
        return inner + [(term.op, self.catalog.get(term.op).lowering)]

    def errors_since(self, mark: int) -> bool:
        return any(d.is_error for d in self.reporter.diagnostics[mark:])

    # -- rules ----------------------------------------------------------------------------------
    def check_rule(self, rule: ast.Rule) -> list[CheckedRule]:
        mark = len(self.reporter.diagnostics)
        sides = ("left-hand side", "right-hand side") if rule.bidirectional else ("left-hand side",)
        for side, term in zip(sides, (rule.lhs, rule.rhs), strict=False):
            if not isinstance(term, ast.Call):
                bare = "variable" if isinstance(term, ast.Var) else "value"
                self.reporter.error(term.pos, f"the {side} of rule '{rule.name}' must be an op "
                                              f"call: a pattern cannot be a bare {bare}")
        env = self.check_sides(rule)
        types = {k: UNKNOWN if v.unknown else TENSOR if v.is_tensor
                 else ATTR_TYPES.get(v.attr_kind, ANY) for k, v in env.items()}
        if rule.guard is not None:
            ExprTyper(self.reporter, types).check(rule.guard, BOOL)
        if rule.tolerance is not None:
            if rule.bidirectional:
                self.reporter.error(rule.tolerance_pos(), "an approximate rule must be "
                                                          "directional ('=>')")
            ExprTyper(self.reporter, types, what="tolerance").check(rule.tolerance, NUMBER)
        if self.errors_since(mark) or self.terms.hit_broken:
            return []
        lhs, rhs = normalize(rule.lhs, self.lookup), normalize(rule.rhs, self.lookup)
        self.check_static_types(rule, lhs, rhs)
        if self.errors_since(mark):
            return []
        forward = CheckedRule(rule.name, lhs, rhs, rule.guard, rule.ruleset, rule.description,
                              rule.pos, tolerance=rule.tolerance)
        if not rule.bidirectional:
            return [forward]
        return [forward, dataclasses.replace(forward, lhs=rhs, rhs=lhs, reverse=True)]

    def check_sides(self, rule: ast.Rule) -> dict[str, VarInfo]:
        """Check both sides; the variables the left-hand side binds."""
        both = rule.bidirectional
        left: dict[str, VarInfo] = {}
        self.terms.check(rule.lhs, BOTH if both else LHS, left)
        hit_broken = self.terms.hit_broken
        right: dict[str, VarInfo] = {} if both else left
        self.terms.check(rule.rhs, BOTH if both else RHS, right)
        self.terms.hit_broken |= hit_broken
        if both:
            for a, b, side in ((right, left, "left"), (left, right, "right")):
                for name, info in a.items():
                    if name not in b:
                        self.reporter.error(info.pos, f"variable '{name}' is not bound on the "
                                                      f"{side}-hand side (a '<=>' rule needs "
                                                      f"the same variables on both sides)")
        return left

    def check_static_types(self, rule: ast.Rule, lhs: ast.Term, rhs: ast.Term) -> None:
        left, right = _static_facts(lhs, self.catalog), _static_facts(rhs, self.catalog)
        for key in sorted(left.keys() & right.keys()):
            if left[key] != right[key]:
                self.reporter.error(rule.pos, f"the two sides of rule '{rule.name}' always "
                                              f"differ in {key}: {left[key]} vs {right[key]}")

    def warn_shadowed(self, rules: list[CheckedRule]) -> None:
        seen: dict[tuple, CheckedRule] = {}
        by_name: dict[str, list[tuple]] = {}
        for rule in rules:
            by_name.setdefault(rule.name, []).append(_canonical_rule(rule))
        for rule in rules:
            if rule.reverse:
                continue
            keys = by_name[rule.name]
            earlier = [seen[k] for k in keys if k in seen]
            if len(earlier) == len(keys):
                self.reporter.warning(rule.pos, f"rule '{rule.name}' is shadowed by the "
                                                f"identical rule '{earlier[0].name}' at "
                                                f"{earlier[0].pos}")
            for k in keys:
                seen.setdefault(k, rule)

    # -- costs and schedule -----------------------------------------------------------------
    def check_cost(self, cost: ast.CostDecl) -> None:
        opdef = self.lookup(cost.op)
        if opdef is BROKEN:
            return
        if opdef is None:
            self.reporter.error(cost.pos, f"cost for unknown op '{cost.op}'"
                                          f"{suggest(cost.op, self.op_names())}")
            return
        slots = [*((name, TENSOR) for name in opdef.inputs),
                 *((a.name, ATTR_TYPES.get(a.kind, ANY)) for a in opdef.attrs)]
        if len(cost.params) > len(slots):
            self.reporter.error(cost.pos, f"cost for '{cost.op}' has {len(cost.params)} "
                                          f"parameters, but the op takes {len(slots)}")
            return
        env: dict[str, str] = {}
        for param, (_, kind) in zip(cost.params, slots, strict=False):
            if param in env:
                self.reporter.error(cost.pos, f"parameter '{param}' appears twice")
            env[param] = kind
        params = {*ROOFLINE_PARAMS, *(k for t in self.targets.values() for k, _ in t.params)}
        typer = ExprTyper(self.reporter, env, in_cost=True, target_params=params, what="cost")
        typer.check(cost.expr, NUMBER)

    def check_schedule(self, schedule: ast.Schedule) -> None:
        for step in schedule.steps:
            if isinstance(step, ast.Repeat) and step.times < 1:
                self.reporter.error(step.pos, f"repeat count must be at least 1, got "
                                              f"{step.times}")
            for name in step.rulesets:
                if name not in self.rulesets:
                    self.reporter.error(step.pos, f"unknown ruleset '{name}' in schedule"
                                                  f"{suggest(name, self.rulesets)}")


def _calls(term: ast.Term) -> Iterator[ast.Call]:
    if isinstance(term, ast.Call):
        yield term
        for arg in (*term.args, *(v for _, v in term.kwargs)):
            yield from _calls(arg)


def _static_facts(term: ast.Term, ops: Catalog) -> dict[str, str]:
    """The dtype, layout or device a term's root op fixes whatever its inputs are: its
    catalog `out_dtype`, or a literal attribute of kind dtype, layout or device (the value
    `cast`, `quantize`, `scalar`, `to_layout` and `to_device` give their result)."""
    if not isinstance(term, ast.Call) or not ops.exists(term.op):
        return {}
    opdef = ops.get(term.op)
    facts = {"dtype": opdef.out_dtype} if opdef.out_dtype else {}
    for k, v in term.kwargs:
        spec = opdef.attr_spec(k)
        if isinstance(v, ast.Literal) and spec and spec.kind in ("dtype", "layout", "device"):
            facts[spec.kind] = v.value
    return facts


def _canonical(node, names: dict[str, int]):
    """`node` without positions and with variables numbered by first use."""
    if isinstance(node, ast.Var):
        return ("var", names.setdefault(node.name, len(names)))
    if isinstance(node, ast.Literal):
        return ("literal", type(node.value).__name__, node.value)
    if dataclasses.is_dataclass(node) and not isinstance(node, ast.Pos):
        return (type(node).__name__, *(_canonical(getattr(node, f.name), names)
                                       for f in dataclasses.fields(node)
                                       if f.compare and f.name != "pos"))
    if isinstance(node, tuple):
        return tuple(_canonical(x, names) for x in node)
    return node


def _canonical_rule(rule: CheckedRule) -> tuple:
    names: dict[str, int] = {}
    return tuple(_canonical(part, names) for part in (rule.lhs, rule.rhs, rule.guard))
