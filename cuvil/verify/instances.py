"""Random instances of a rule's left-hand side: the types of its variables and the values
of its attribute variables (`evaluate.py` then gives them tensors).

`Builder` walks the left-hand side top-down. Each op call asks its shape generator
(`OpDef.shapes`, `cuvil/ops/draw`) what its inputs must be; a variable takes a type the
first time it is met (later uses are judged by the ops' `infer`); a composite op is built
through its body, so its inputs fit what the body needs. The catalog's `infer` checks every
call on the way back up, so an instance that comes out is well typed by construction. The
guard's plain facts (`guards.hints`) are put in up front; the whole guard is checked on the
finished instance.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from cuvil.dsl.ast import Call, Literal, Term, Var, Wildcard
from cuvil.errors import CuvilError
from cuvil.ir.types import LAYOUTS, NCHW, NHWC, DType, TensorType, default_layout
from cuvil.ops import registry
from cuvil.ops.draw import FREE, Invalid, Want, fits, generic
from cuvil.ops.registry import (
    COMPOSITE,
    CONV,
    CONVERT,
    ELEMENTWISE,
    NORM,
    POOL,
    REDUCTION,
    OpDef,
)
from cuvil.verify.guards import Hint, Hints

SPECIAL_SCALARS = (0.0, 1.0, -1.0, 0.5, 2.0)
MAX_NUMEL = 1 << 18  # elements of the largest leaf tensor
DTYPES = tuple(str(d) for d in DType)
OTHER_DTYPES = tuple(d for d in DType if d is not DType.f32)
LAYOUTS_4D = (NCHW, NCHW, NCHW, NHWC, NHWC, "contiguous")
_RANK_WEIGHTS = (1, 4, 4, 3, 3)  # ranks 0..4
_RANK_KEEPING = (ELEMENTWISE, NORM, CONVERT)  # op kinds whose result has their inputs' rank


def leaf_key(term: Wildcard) -> str:
    """The binding name of a `_` of the left-hand side."""
    return f"_@{term.pos.line}:{term.pos.col}"


@dataclass
class Instance:
    """One assignment of the left-hand side's variables."""

    types: dict[str, TensorType]  # tensor variables and `_` leaves
    attrs: dict[str, Any]  # attribute variables (and `_` attributes)
    consts: set[str]
    scalars: dict[str, float]  # values of the 0-d constants
    domains: dict[str, Any]
    targets: frozenset[str]
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)

    def size(self) -> tuple[int, int, int]:
        """How unusual and big the instance is, for picking the simplest counterexample:
        fewest values not in f32 first, then fewest elements."""
        numels = [math.prod(t.shape) for t in self.types.values()]
        unusual = sum(t.dtype is not DType.f32 for t in self.types.values())
        return unusual, sum(numels), max(numels, default=0)


class Attrs:
    """A call's attributes while its generator runs: literals and bound variables are
    fixed; a free one is chosen once through `get` and bound at once."""

    def __init__(self, builder: Builder, call: Call, opdef: OpDef):
        self.builder, self.opdef = builder, opdef
        self.values: dict[str, Any] = {}
        self.names: dict[str, str] = {}  # attribute -> variable (or `_` key) to bind
        for key, term in call.kwargs:
            if isinstance(term, Literal):
                self.values[key] = term.value
            else:
                self.names[key] = term.name if isinstance(term, Var) else leaf_key(term)

    def fixed(self, key: str) -> bool:
        return key in self.values or self.names.get(key) in self.builder.attrs

    def get(self, key: str, choose: Any = None) -> Any:
        if key not in self.values:
            name = self.names.get(key)
            if name in self.builder.attrs:
                self.values[key] = self.builder.attrs[name]
            else:
                self.values[key] = choose() if callable(choose) else choose
                if name is not None:
                    self.builder.attrs[name] = self.values[key]
        return self.values[key]

    def complete(self) -> dict[str, Any]:
        """Every attribute in signature order; one no generator chose is drawn by kind."""
        for spec in self.opdef.attrs:
            self.get(spec.name, lambda spec=spec: self.builder.draw_attr(spec))
        return {spec.name: self.values[spec.name] for spec in self.opdef.attrs}


class Builder:
    """Builds one instance of a left-hand side; `ctx` of the shape generators."""

    def __init__(self, defs: Mapping[str, OpDef], hints: Hints, rng: random.Random,
                 max_dim: int):
        self.defs, self.rng, self.max_dim = defs, rng, max_dim
        self.hints, attrs = hints.pick(rng)
        self.types: dict[str, TensorType] = {}
        self.attrs: dict[str, Any] = attrs
        self.consts: set[str] = set()
        self.scalars: dict[str, float] = {}
        self.domains: dict[str, Any] = {}
        self.device = "cuda" if rng.random() < 0.15 else "cpu"

    # -- the walk -----------------------------------------------------------------------------
    def build(self, term: Term, want: Want) -> TensorType:
        if isinstance(term, Var):
            return self.leaf(term.name, want)
        if isinstance(term, Wildcard):
            return self.leaf(leaf_key(term), want)
        if not isinstance(term, Call):
            raise Invalid(f"a literal {term.value!r} where a tensor is expected")
        opdef = registry.get(term.op, self.defs)
        if opdef.kind == COMPOSITE:
            return self.build(expand(term, opdef), want)
        attrs = Attrs(self, term, opdef)
        if self.determined(term, ()):  # nothing left to choose: its type follows
            types = [self.build(a, FREE) for a in term.args]
        else:
            types = self.build_inputs(term, want, attrs)
        try:
            out = registry.infer(term.op, types, attrs.complete(), defs=self.defs)
        except CuvilError as e:
            raise Invalid(str(e)) from None
        except Exception as e:  # a catalog bug: say where, let the driver carry on
            raise Invalid(f"{term.op}: type inference failed ({type(e).__name__}: {e})") from None
        if not fits(out, want):
            raise Invalid(f"{term.op} gives {out}, not what its user needs")
        return out

    def build_inputs(self, call: Call, want: Want, attrs: Attrs) -> list[TensorType]:
        steps = (attrs.opdef.shapes or generic)(self, want, attrs, call.args)
        types: list[TensorType] = []
        need = next(steps, None)
        while need is not None and len(types) < len(call.args):
            types.append(self.build(call.args[len(types)], need))
            try:
                need = steps.send(types[-1])
            except StopIteration:
                need = None
        while len(types) < len(call.args):  # a generator that stopped early
            types.append(self.build(call.args[len(types)], Want(device=want.device)))
        return types

    def leaf(self, name: str, want: Want) -> TensorType:
        if name in self.types:  # the op's `infer` decides whether it fits this use too
            return self.types[name]
        hint = self.hints.get(name, Hint())
        want = self.merge(want, hint)
        shape = self.fill(want.shape)
        while math.prod(shape) < hint.min_numel:
            i = self.rng.randrange(len(shape)) if shape else None
            if i is None or math.prod(shape) > MAX_NUMEL:
                break
            shape = (*shape[:i], shape[i] * 2, *shape[i + 1:])
        if math.prod(shape) > MAX_NUMEL:
            raise Invalid("a tensor too big to verify on")
        dtype = want.dtype or self.free_dtype()
        layout = want.layout or (self.rng.choice(LAYOUTS_4D) if len(shape) == 4
                                 else default_layout(len(shape)))
        if layout in (NCHW, NHWC) and len(shape) != 4 or layout not in LAYOUTS:
            raise Invalid(f"no rank-{len(shape)} value has layout {layout}")
        t = TensorType(shape, dtype, layout, want.device or self.device)
        self.types[name] = t
        self.domains[name] = want.domain
        const = hint.const if hint.const is not None else self.rng.random() < 0.1
        if const:
            self.consts.add(name)
            if t.rank == 0 and t.dtype is not DType.bf16:
                value = hint.value if hint.value is not None else self.scalar()
                self.scalars[name] = _representable(value, t.dtype)
        return t

    def free_dtype(self, float_only: bool = False) -> DType:
        """A leaf's dtype when no op or guard fixes it: f32 mostly, any other dtype the
        catalog knows (a float one for a float-only op) in a third of draws (a rule sound
        for floats may not be for ints)."""
        others = [d for d in OTHER_DTYPES if d.is_float] if float_only else OTHER_DTYPES
        return DType.f32 if self.rng.random() < 2 / 3 else self.rng.choice(others)

    # -- what generators use ------------------------------------------------------------------
    def dim(self, lo: int = 1) -> int:
        if self.max_dim >= 8 and self.rng.random() < 0.1:
            return max(lo, 8)
        return self.rng.randint(lo, max(lo, self.max_dim))

    def rank(self, lo: int = 0, hi: int = 4) -> int:
        ranks = list(range(lo, hi + 1))
        return self.rng.choices(ranks, [_RANK_WEIGHTS[min(r, 4)] for r in ranks])[0]

    def fill(self, shape: tuple[int | None, ...] | None, rank: int | None = None,
             lo: int = 1) -> tuple[int, ...]:
        """`shape` with its free dims drawn (a free shape gets a random rank first)."""
        if shape is None:
            shape = (None,) * (self.rank() if rank is None else rank)
        return tuple(self.dim(lo) if d is None else d for d in shape)

    def known(self, term: Term) -> TensorType | None:
        """The type of an input that is fixed before it is built: a bound variable, a
        scalar, or a call over them whose attributes are all fixed."""
        if isinstance(term, Var):
            return self.types.get(term.name)
        if not isinstance(term, Call):
            return None
        attrs = {}
        for key, value in term.kwargs:
            if isinstance(value, Literal):
                attrs[key] = value.value
            elif isinstance(value, Var) and value.name in self.attrs:
                attrs[key] = self.attrs[value.name]
            else:
                return None
        types = [self.known(a) for a in term.args]
        if any(t is None for t in types):
            return None
        try:
            return registry.infer(term.op, types, attrs, defs=self.defs)
        except Exception:  # not valid: the walk will say why
            return None

    def determined(self, term: Term, before: tuple[Term, ...]) -> bool:
        """Whether `term`'s variables are all bound once the terms `before` are built."""
        bound = set(self.types) | set(self.attrs)
        for t in before:
            bound |= variables(t)
        return variables(term) <= bound and not _has_wildcard(term)

    def rank_hint(self, term: Term) -> int | None:
        """The rank `term` will likely have: known, said by the guard, or passed up through
        ops that keep their input's rank."""
        known = self.known(term)
        if known is not None:
            return known.rank
        if isinstance(term, Var) and term.name in self.hints:
            hint = self.hints[term.name]
            return len(hint.shape) if hint.shape is not None else hint.rank
        if not isinstance(term, Call) or not term.args:
            return None
        opdef = registry.get(term.op, self.defs)
        if opdef.kind == COMPOSITE:
            return self.rank_hint(expand(term, opdef))
        if opdef.kind in (CONV, POOL):
            return 4
        ranks = [self.rank_hint(a) for a in term.args]
        if opdef.kind in _RANK_KEEPING:  # the highest rank of its inputs (a 0-d one says
            known = [r for r in ranks if r]  # nothing when others are unknown)
            return max(ranks) if None not in ranks else max(known, default=None)
        if term.op in ("transpose", "permute", "matmul", "bmm") or _keeps_dims(term):
            return max((r for r in ranks if r is not None), default=None)
        return None

    def least_rank(self, term: Term) -> int:
        """A rank below which `term` cannot be built (`softmax(x, dim=1)` needs 2; a
        reduction over dim 0 or -1 also takes a 0-d value, as in torch)."""
        if not isinstance(term, Call):
            return 0
        opdef = registry.get(term.op, self.defs)
        if opdef.kind == COMPOSITE:
            return self.least_rank(expand(term, opdef))
        own = 0
        for key, value in term.kwargs:
            if key in ("dim", "dim0", "dim1") and isinstance(value, Literal):
                dims = value.value if isinstance(value.value, tuple) else (value.value,)
                dims = [d for d in dims if isinstance(d, int)]
                if opdef.kind == REDUCTION and set(dims) <= {0, -1}:
                    continue
                own = max([own, *(d + 1 if d >= 0 else -d for d in dims)])
        if opdef.kind in _RANK_KEEPING or opdef.kind == REDUCTION and _keeps_dims(term):
            own = max([own, *(self.least_rank(a) for a in term.args)])
        return own

    def merge(self, want: Want, hint: Hint) -> Want:
        """`want` with the guard's facts about this variable put over it: where they
        disagree the guard wins, and the op's `infer` judges the result."""
        shape = want.shape
        if hint.shape is not None:
            shape = hint.shape
        elif hint.rank is not None and hint.rank != want.rank:
            shape = (None,) * hint.rank
        if hint.dims:
            rank = len(shape) if shape is not None else self.rank(
                max(i + 1 if i >= 0 else -i for i in hint.dims), 4)
            dims = list(shape) if shape is not None else [None] * rank
            for i, d in hint.dims.items():
                if -rank <= i < rank:
                    dims[i] = d[1] * self.rng.choice((1, 2)) if isinstance(d, tuple) else d
            shape = tuple(dims)
        changes = {name: getattr(hint, name) for name in ("layout", "device")
                   if getattr(hint, name) is not None}
        if hint.dtype is not None:
            changes["dtype"] = DType(hint.dtype)
        return want.with_(shape=shape, **changes)

    def scalar(self) -> float:
        if self.rng.random() < 0.6:
            return self.rng.choice(SPECIAL_SCALARS)
        return round(self.rng.gauss(0.0, 2.0), 3)

    def draw_attr(self, spec) -> Any:
        """A value for an attribute no generator chose: one of its catalog samples, else its
        default, else one of its kind."""
        if spec.samples:
            return self.rng.choice(spec.samples)
        if not spec.required:
            return spec.default
        return {"int": lambda: self.rng.randint(-2, 2), "float": self.scalar,
                "number": self.scalar, "bool": lambda: self.rng.random() < 0.5,
                "dtype": lambda: self.rng.choice(DTYPES), "layout": lambda: "contiguous",
                "device": lambda: self.device, "str": lambda: "none"}.get(
                    spec.kind, lambda: None)()


def _keeps_dims(term: Call) -> bool:
    return any(k == "keepdim" and isinstance(v, Literal) and v.value is True
               for k, v in term.kwargs)


def variables(term: Term) -> set[str]:
    """The variables of a term, tensor and attribute ones."""
    if isinstance(term, Var):
        return {term.name}
    if not isinstance(term, Call):
        return set()
    out = {v.name for _, v in term.kwargs if isinstance(v, Var)}
    return out.union(*(variables(a) for a in term.args))


def _has_wildcard(term: Term) -> bool:
    if isinstance(term, Wildcard):
        return True
    return isinstance(term, Call) and any(
        _has_wildcard(t) for t in (*term.args, *(v for _, v in term.kwargs)))


def _representable(value: float, dtype: DType) -> float | int | bool:
    """`value` as a 0-d constant of `dtype` holds it."""
    if dtype is DType.bool:
        return bool(value)
    if not dtype.is_float:
        info = torch.iinfo(dtype.torch)
        return min(max(int(value), info.min), info.max)
    return value


def expand(call: Call, opdef: OpDef) -> Term:
    """A composite call as its body over the call's own arguments."""
    env: dict[str, Term] = dict(zip(opdef.inputs, call.args, strict=True))
    env.update(call.kwargs)
    return _substitute(opdef.body.body, env)


def _substitute(term: Term, env: dict[str, Term]) -> Term:
    if isinstance(term, Var):
        return env.get(term.name, term)
    if not isinstance(term, Call):
        return term
    return Call(term.op, tuple(_substitute(a, env) for a in term.args),
                tuple((k, _substitute(v, env)) for k, v in term.kwargs), term.pos)


def new_instance(builder: Builder, lhs: Term, targets: frozenset[str]) -> Instance:
    builder.build(lhs, FREE)
    return Instance(builder.types, builder.attrs, builder.consts, builder.scalars,
                    builder.domains, targets)
