"""Tensors for an instance, and terms evaluated over it.

`fill_values` draws the leaves' tensors (seeded; a variance stays positive, indices stay in
range). `type_of` and `value_of` evaluate any term over an instance, the types through the
catalog's `infer` and the values through its torch references (composite ops through their
bodies); an attribute the right-hand side computes from the match (`eps=value(e)`) is
evaluated as the guard would.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import torch

from cuvil.dsl.ast import Builtin, Call, Literal, Term, Var, Wildcard
from cuvil.ir.types import DType, TensorType
from cuvil.ops import registry
from cuvil.ops.draw import MOSTLY_POSITIVE, POSITIVE
from cuvil.ops.registry import OpDef
from cuvil.verify.guards import compute
from cuvil.verify.instances import Instance, leaf_key


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
    """The call's attribute values; a computed one (`eps=value(e)`) may raise `Unknown`."""
    out = {}
    for key, term in call.kwargs:
        if isinstance(term, Literal):
            out[key] = term.value
        elif isinstance(term, Builtin):
            out[key] = compute(term, inst)
        else:
            out[key] = inst.attrs[term.name if isinstance(term, Var) else leaf_key(term)]
    return out


def computed_attrs(term: Term) -> list[Builtin]:
    """The attributes of a right-hand side computed from the match."""
    if not isinstance(term, Call):
        return []
    own = [v for _, v in term.kwargs if isinstance(v, Builtin)]
    return own + [b for a in term.args for b in computed_attrs(a)]


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
    weak = [i for i, a in enumerate(term.args) if isinstance(a, Call) and a.op == "scalar"]
    out_type = type_of(term, inst, defs, term.op) if weak else None
    for i in weak:
        number = attrs_of(term.args[i], inst).get("value")
        args[i] = registry.weak_operand(args[i], number, out_type)
    with torch.no_grad():
        out = registry.get(term.op, defs).ref(args, attrs_of(term, inst))
    if weak:
        out = registry.weak_result(out, out_type)
    if seen is not None:
        seen.append(out)
    return out
