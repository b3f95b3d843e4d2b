"""Guards (`where ...`) compiled to egglog query atoms; never evaluated as Python.

A guard becomes a disjunction of conjunctions of atoms (`or` splits a rule into several
egglog rules). Built-ins read the analyses Cuvil fills: each e-class has a type id
(`ty`), and tables keyed by type id hold `rank`, `dim` (also at negative indices),
`numel`, `shape`, `dtype`, `layout`, `device`, `is_float`; `is_const` and `value` are kept
per e-class. A lookup that has no entry fails the match, which is how
"unknown means no match" holds: a symbolic dim is stored as a negative id, so arithmetic and
ordering on dims first require `dim >= 0`; `numel` is only stored when static.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cuvil.dsl import ast
from cuvil.dsl import builtins as bi
from cuvil.egraph.schema import BOOL, F64, I64, STRING, encode_f64, encode_string
from cuvil.errors import CuvilError
from cuvil.ir.text import format_value

Alternatives = list[list[str]]  # or of ands of atoms
TENSOR = "T"
SHAPE = "shape"
# The egglog sort of each guard value type; the analyses the built-in table keeps.
SORT_OF = {bi.INT: I64, bi.FLOAT: F64, bi.BOOL: BOOL, bi.STR: STRING, bi.TUPLE: STRING}
TYPE_ANALYSES = {n: SORT_OF[t] for n, t in bi.analyses("type").items() if n != "dim"}
CLASS_ANALYSES = {n: SORT_OF[t] for n, t in bi.analyses("class").items()}
_NEGATE = {"==": "!=", "!=": "==", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
_EGG_CMP = {"==": "=", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


@dataclass
class GuardCompiler:
    """Compiles guards of one rule. `variables` maps pattern vars to their sort (T for
    tensors, else i64/f64/bool/String for attributes)."""

    variables: dict[str, str]
    targets: tuple[str, ...]
    where: str
    used: set[str] = field(default_factory=set)  # analysis functions read
    dims: set[int] = field(default_factory=set)  # dim indices read
    _fresh: int = 0

    def compile(self, guard: ast.Expr | None) -> Alternatives:
        if guard is None:
            return [[]]
        return [list(dict.fromkeys(atoms)) for atoms in self.condition(guard, False)]

    # -- booleans -------------------------------------------------------------------------
    def condition(self, e: ast.Expr, negate: bool) -> Alternatives:
        match e:
            case ast.Not(operand=inner):
                return self.condition(inner, not negate)
            case ast.BinOp(op="and" | "or" as op, left=a, right=b):
                conj = (op == "and") != negate
                left, right = self.condition(a, negate), self.condition(b, negate)
                if conj:
                    return [la + ra for la in left for ra in right]
                return left + right
            case ast.BinOp(op=op, left=a, right=b) if op in _NEGATE:
                return [self.comparison(_NEGATE[op] if negate else op, a, b)]
            case ast.Literal(value=bool(v)):
                return [[]] if v != negate else []
            case ast.Builtin(name="has_target", args=(ast.Literal(value=str(t)),)):
                site = bi.Site(targets=frozenset(self.targets))
                return [[]] if bi.BUILTINS["has_target"].value(site, t) != negate else []
        text, sort, atoms = self.value(e)
        if sort != BOOL:
            raise self.error(e, "a guard must be a condition")
        return [[*atoms, f"(= {text} {'false' if negate else 'true'})"]]

    def comparison(self, op: str, a: ast.Expr, b: ast.Expr) -> list[str]:
        ta, sa, atoms_a = self.value(a, compared_with_dim=_is_dim(b) and op in ("==",))
        tb, sb, atoms_b = self.value(b, compared_with_dim=_is_dim(a) and op in ("==",))
        if {sa, sb} == {I64, F64}:
            ta, tb = (f"(to-f64 {t})" if s == I64 else t for t, s in ((ta, sa), (tb, sb)))
        elif sa != sb:
            raise self.error(a, f"cannot compare {_name(sa)} with {_name(sb)}")
        if op not in ("==", "!=") and sa not in (I64, F64):
            raise self.error(a, f"cannot order {_name(sa)} values")
        return [*atoms_a, *atoms_b, f"({_EGG_CMP[op]} {ta} {tb})"]

    # -- values ---------------------------------------------------------------------------
    def value(self, e: ast.Expr, compared_with_dim: bool = False) -> tuple[str, str, list[str]]:
        """(egglog expression, sort, atoms that must hold for it to be known)."""
        match e:
            case ast.Literal(value=bool(v)):
                return ("true" if v else "false"), BOOL, []
            case ast.Literal(value=int(v)):
                return str(v), I64, []
            case ast.Literal(value=float(v)):
                return encode_f64(v), F64, []
            case ast.Literal(value=str(v)):
                return encode_string(v), STRING, []
            case ast.Literal(value=tuple(v)):
                return encode_string(format_value(v)), STRING, []
            case ast.Neg(operand=inner):
                text, sort, atoms = self.value(inner)
                self.numeric(e, sort)
                return (f"(- 0 {text})" if sort == I64 else f"(- 0.0 {text})"), sort, atoms
            case ast.Var(name=name):
                sort = self.variables.get(name)
                if sort is None or sort == TENSOR:
                    raise self.error(e, f"'{name}' is not a value here")
                return f"v_{name}", sort, []
            case ast.BinOp(op=op, left=a, right=b) if op in "+-*/%":
                return self.arithmetic(op, a, b)
            case ast.Builtin():
                return self.builtin(e, compared_with_dim)
        raise self.error(e, "unsupported guard expression")

    def arithmetic(self, op: str, a: ast.Expr, b: ast.Expr) -> tuple[str, str, list[str]]:
        ta, sa, atoms_a = self.value(a)
        tb, sb, atoms_b = self.value(b)
        self.numeric(a, sa)
        self.numeric(b, sb)
        atoms = atoms_a + atoms_b
        if op == "%" and (sa, sb) != (I64, I64):
            raise self.error(a, "% needs integers")
        sort = F64 if op == "/" or F64 in (sa, sb) else I64
        if sort == F64:
            ta, tb = (f"(to-f64 {t})" if s == I64 else t for t, s in ((ta, sa), (tb, sb)))
        if op in "/%":
            atoms.append(f"(!= {tb} {'0.0' if sort == F64 else '0'})")
        return f"({op} {ta} {tb})", sort, atoms

    def builtin(self, e: ast.Builtin, compared_with_dim: bool) -> tuple[str, str, list[str]]:
        if e.name == "dim":
            if len(e.args) != 2:
                raise self.error(e, "dim(x, i) takes two arguments")
            index = _int_literal(e.args[1])
            if index is None:
                raise self.error(e.args[1], "dim's index must be an integer literal")
            ty, atoms = self.type_of(e.args[0])
            self.used.add("dim")
            self.dims.add(index)
            var = self.fresh()
            atoms.append(f"(= {var} (t_dim {ty} {index}))")
            if not compared_with_dim:
                atoms.append(f"(>= {var} 0)")
            return var, I64, atoms
        if e.name in TYPE_ANALYSES or e.name in CLASS_ANALYSES:
            if len(e.args) != 1:
                raise self.error(e, f"{e.name}(x) takes one argument")
            self.used.add(e.name)
            var = self.fresh()
            if e.name in CLASS_ANALYSES:
                x = self.tensor(e.args[0])
                return var, CLASS_ANALYSES[e.name], [f"(= {var} ({e.name} {x}))"]
            ty, atoms = self.type_of(e.args[0])
            return var, TYPE_ANALYSES[e.name], [*atoms, f"(= {var} (t_{e.name} {ty}))"]
        raise self.error(e, f"unknown built-in '{e.name}'")

    def type_of(self, e: ast.Expr) -> tuple[str, list[str]]:
        """The variable holding the type id of tensor `e`, and the atom binding it once."""
        x = self.tensor(e)
        return f"_t{x}", [f"(= _t{x} (ty {x}))"]

    # -- helpers --------------------------------------------------------------------------
    def tensor(self, e: ast.Expr) -> str:
        if isinstance(e, ast.Var) and self.variables.get(e.name) == TENSOR:
            return f"v_{e.name}"
        raise self.error(e, "expected a tensor variable bound by the pattern")

    def numeric(self, e: ast.Expr, sort: str) -> None:
        if sort not in (I64, F64):
            raise self.error(e, f"arithmetic on {_name(sort)}")

    def fresh(self) -> str:
        self._fresh += 1
        return f"_g{self._fresh}"

    def error(self, e: ast.Expr, message: str) -> CuvilError:
        pos = getattr(e, "pos", None)
        return CuvilError(f"{pos or self.where}: error: {message}")


def _is_dim(e: ast.Expr) -> bool:
    return isinstance(e, ast.Builtin) and e.name == "dim"


def _int_literal(e: ast.Expr) -> int | None:
    if isinstance(e, ast.Literal) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return e.value
    if isinstance(e, ast.Neg):
        inner = _int_literal(e.operand)
        return None if inner is None else -inner
    return None


def _name(sort: str) -> str:
    return {I64: "int", F64: "float", BOOL: "bool", STRING: "string"}.get(sort, sort)
