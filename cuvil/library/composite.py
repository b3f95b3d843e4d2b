"""Composite ops: an `op NAME(params) = BODY` item of a `.cvr` file as an `OpDef`.

The op is defined by what it computes. Its type is inferred by instantiating the body's
types through the catalog (`linear`'s shape follows from `add(matmul(x, w), b)`), its
reference implementation evaluates the body with the catalog's torch implementations, and
its work estimate is the sum of the body's. Parameters used at tensor positions of the body
are the op's `inputs`; those used at attribute positions are its (required) `attrs`.
`OpDef.body` is the `OpDecl` with its body in normal form; `OpDef.kernel` is the kernel
family its `kernel` clause names (`cuvil.dsl.kernels`), "" for an op lowered as its parts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from cuvil.dsl.ast import Call, Literal, OpDecl, Term, Var
from cuvil.ir.types import TensorType
from cuvil.ops import registry
from cuvil.ops.registry import COMPOSITE, AttrSpec, OpDef


def composite_opdef(decl: OpDecl, inputs: tuple[str, ...], attrs: tuple[AttrSpec, ...],
                    defs: Mapping[str, OpDef]) -> OpDef:
    """The OpDef of `decl` (body already normalised); `defs` holds the other composite ops."""
    body = CompositeBody(decl, inputs, defs)
    return OpDef(decl.name, inputs, attrs, body.infer, body.ref, COMPOSITE, flops=body.flops,
                 doc=decl.description, body=decl, kernel=decl.kernel)


class CompositeBody:
    """What a composite op computes, as the `infer`, `ref` and `flops` of its OpDef.

    A class rather than closures so that OpDefs (and graphs holding them) pickle.
    """

    def __init__(self, decl: OpDecl, inputs: tuple[str, ...], defs: Mapping[str, OpDef]):
        self.decl, self.inputs, self.defs = decl, inputs, defs
        self.source = f"op {decl.name} at {decl.pos.where}"

    def infer(self, types: list[TensorType], attr_values: dict[str, Any]) -> TensorType:
        env = dict(zip(self.inputs, types, strict=True))
        return _typed(self.decl.body, env, attr_values, self.defs, self.source)[0]

    def ref(self, tensors: list[torch.Tensor], attr_values: dict[str, Any]) -> torch.Tensor:
        env = dict(zip(self.inputs, tensors, strict=True))
        return _evaluate(self.decl.body, env, attr_values, self.defs)

    def flops(self, types: list[TensorType], out: TensorType, attr_values: dict[str, Any]) -> Any:
        env = dict(zip(self.inputs, types, strict=True))
        return _typed(self.decl.body, env, attr_values, self.defs, self.source)[1]


def body_calls(opdef: OpDef, types: list[TensorType], attr_values: dict[str, Any],
               defs: Mapping[str, OpDef]) -> list[tuple[str, dict, list[TensorType],
                                                         TensorType]]:
    """Each call in a composite op's body, arguments first: (op, attrs, input types,
    output type), for these input types (what the cost model charges a fused op for)."""
    calls: list = []
    source = f"op {opdef.name}"

    def walk(term: Term) -> TensorType:
        if isinstance(term, Var):
            return env[term.name]
        ins = [walk(arg) for arg in term.args]
        attrs = _attr_values(term, attr_values)
        out = registry.infer(term.op, ins, attrs, source, defs)
        calls.append((term.op, attrs, ins, out))
        return out

    env = dict(zip(opdef.inputs, types, strict=True))
    walk(opdef.body.body)
    return calls


def _attr_values(call: Call, attr_values: dict[str, Any]) -> dict[str, Any]:
    return {key: attr_values[value.name] if isinstance(value, Var) else value.value
            for key, value in call.kwargs if isinstance(value, Var | Literal)}


def _typed(term: Term, env: dict[str, TensorType], attr_values: dict[str, Any],
           defs: Mapping[str, OpDef], source: str) -> tuple[TensorType, Any]:
    """The type of `term` and the flops of computing it."""
    if isinstance(term, Var):
        return env[term.name], 0
    assert isinstance(term, Call), term
    typed = [_typed(arg, env, attr_values, defs, source) for arg in term.args]
    types = [t for t, _ in typed]
    attrs = _attr_values(term, attr_values)
    out = registry.infer(term.op, types, attrs, source, defs)
    work = registry.flops(term.op, types, out, attrs, defs)
    return out, sum((w for _, w in typed), start=work)


def _evaluate(term: Term, env: dict[str, torch.Tensor], attr_values: dict[str, Any],
              defs: Mapping[str, OpDef]) -> torch.Tensor:
    if isinstance(term, Var):
        return env[term.name]
    assert isinstance(term, Call), term
    args = [_evaluate(arg, env, attr_values, defs) for arg in term.args]
    return registry.get(term.op, defs).ref(args, _attr_values(term, attr_values))
