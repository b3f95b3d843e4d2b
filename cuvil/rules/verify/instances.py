"""Random instances of a rule's left-hand side: types, attribute values, then tensors.

`Builder` walks the left-hand side top-down. Each op call asks its shape generator
(`shapes.py`) what its inputs must be; a variable takes a type the first time it is met
and must fit every later use; a composite op is built through its body, so its inputs fit
what the body needs. The catalog's `infer` checks every call on the way back up, so an
instance that comes out is well typed by construction. The guard's plain facts (`hints`)
are made true up front; the rest of the guard is checked on the finished instance.

An `Instance` then gets tensors (`fill_values`) and can evaluate any term over them: the
types through the catalog's `infer`, the values through its torch references (composite
ops through their bodies).
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
from cuvil.ops.registry import COMPOSITE, OpDef
from cuvil.rules.verify.guards import Hint, Hints
from cuvil.rules.verify.shapes import (
    FREE,
    MOSTLY_POSITIVE,
    POSITIVE,
    Invalid,
    Want,
    fits,
    generator_of,
)

SPECIAL_SCALARS = (0.0, 1.0, -1.0, 0.5, 2.0)
MAX_NUMEL = 1 << 18  # elements of the largest leaf tensor
DTYPES = tuple(str(d) for d in DType)
LAYOUTS_4D = (NCHW, NCHW, NCHW, NHWC, NHWC, "contiguous")
_RANK_WEIGHTS = (1, 4, 4, 3, 3)  # ranks 0..4


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

    def size(self) -> tuple[int, int]:
        """How big the instance is, for picking the smallest counterexample."""
        numels = [math.prod(t.shape) for t in self.types.values()]
        return sum(numels), max(numels, default=0)


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
        steps = generator_of(call.op)(self, want, attrs, call.args)
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
        dtype = want.dtype or self.dtype()
        if hint.is_float and not dtype.is_float:
            dtype = DType.f32
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
                self.scalars[name] = hint.value if hint.value is not None else self.scalar()
        return t

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
        """The type of an input that is fixed before it is built."""
        if isinstance(term, Var):
            return self.types.get(term.name)
        if isinstance(term, Call) and term.op == "scalar":
            kwargs = dict(term.kwargs)
            if isinstance(kwargs.get("dtype"), Literal):
                return TensorType((), DType(kwargs["dtype"].value))
        return None

    def rank_hint(self, term: Term) -> int | None:
        known = self.known(term)
        if known is not None:
            return known.rank
        if isinstance(term, Var) and term.name in self.hints:
            hint = self.hints[term.name]
            return len(hint.shape) if hint.shape is not None else hint.rank
        return None

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

    def dtype(self) -> DType:
        """The dtype of a leaf nobody constrains: f32, now and then another."""
        if self.rng.random() < 0.9:
            return DType.f32
        return self.rng.choice((DType.f16, DType.f64, DType.i64, DType.i32))

    def scalar(self) -> float:
        if self.rng.random() < 0.6:
            return self.rng.choice(SPECIAL_SCALARS)
        return round(self.rng.gauss(0.0, 2.0), 3)

    def draw_attr(self, spec) -> Any:
        """A value for an attribute no generator chose: its default, else one of its kind."""
        if not spec.required:
            return spec.default
        return {"int": lambda: self.rng.randint(-2, 2), "float": self.scalar,
                "number": self.scalar, "bool": lambda: self.rng.random() < 0.5,
                "dtype": lambda: self.rng.choice(DTYPES), "layout": lambda: "contiguous",
                "device": lambda: self.device, "str": lambda: "none"}.get(
                    spec.kind, lambda: None)()


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


# -- values -------------------------------------------------------------------------------------
def fill_values(inst: Instance, rng: random.Random) -> None:
    """Random tensors for the instance's leaves (seeded from `rng`)."""
    gen = torch.Generator().manual_seed(rng.getrandbits(62))
    positive = rng.random() < 0.75
    for name in sorted(inst.types):
        t = inst.types[name]
        if name in inst.scalars:
            inst.tensors[name] = torch.tensor(inst.scalars[name], dtype=t.dtype.torch)
        else:
            inst.tensors[name] = random_tensor(t, inst.domains.get(name), positive, gen)


def random_tensor(t: TensorType, domain: Any, positive: bool,
                  gen: torch.Generator) -> torch.Tensor:
    shape = tuple(t.shape)
    if isinstance(domain, tuple) and domain[0] == "below":
        return torch.randint(0, max(domain[1], 1), shape, generator=gen).to(t.dtype.torch)
    if t.dtype is DType.bool:
        return torch.rand(shape, generator=gen) < 0.5
    if not t.dtype.is_float:
        lo = 0 if t.dtype is DType.u8 else -4
        return torch.randint(lo, lo + 9, shape, generator=gen).to(t.dtype.torch)
    x = torch.randn(shape, generator=gen)
    if domain == POSITIVE or (domain == MOSTLY_POSITIVE and positive):
        x = x.abs() + 0.1
    return x.to(t.dtype.torch)


# -- evaluating terms over an instance --------------------------------------------------------
def attrs_of(call: Call, inst: Instance) -> dict[str, Any]:
    out = {}
    for key, term in call.kwargs:
        if isinstance(term, Literal):
            out[key] = term.value
        else:
            out[key] = inst.attrs[term.name if isinstance(term, Var) else leaf_key(term)]
    return out


def type_of(term: Term, inst: Instance, defs: Mapping[str, OpDef], where: str) -> TensorType:
    """The type of `term` over the instance; `ShapeError` if the catalog rejects it."""
    if isinstance(term, Var):
        return inst.types[term.name]
    if isinstance(term, Wildcard):
        return inst.types[leaf_key(term)]
    types = [type_of(a, inst, defs, where) for a in term.args]
    return registry.infer(term.op, types, attrs_of(term, inst), where, defs)


def value_of(term: Term, inst: Instance, defs: Mapping[str, OpDef],
             seen: list[torch.Tensor] | None = None) -> torch.Tensor:
    """The value of `term` by the reference implementations; every intermediate value
    goes to `seen` (for the magnitude the comparison scales its tolerance by)."""
    if isinstance(term, Var):
        return inst.tensors[term.name]
    if isinstance(term, Wildcard):
        return inst.tensors[leaf_key(term)]
    args = [value_of(a, inst, defs, seen) for a in term.args]
    with torch.no_grad():
        out = registry.get(term.op, defs).ref(args, attrs_of(term, inst))
    if seen is not None:
        seen.append(out)
    return out
