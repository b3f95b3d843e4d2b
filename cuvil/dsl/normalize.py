"""Arguments matched to op signatures, and terms put in the normal form later stages consume.

Positional arguments fill an op's tensor inputs (optional ones included), then its
attributes in signature order; a variadic op (`cat`) takes every positional argument as a
tensor. In the normal form (see `cuvil.library.checked`) each `Call` has its tensor arguments
in `args` and every attribute in `kwargs`, in signature order with the catalog's defaults
filled in, and a number where a tensor is expected is a 0-d `scalar` call. On a
right-hand side an attribute may be computed from the match (`eps=value(e)`): it becomes
the `Builtin` it names.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cuvil.dsl.ast import Builtin, Call, Literal, Pos, Term
from cuvil.dsl.builtins import COMPUTED

if TYPE_CHECKING:  # the catalog imports torch; `cuvil check` reads a snapshot of it
    from cuvil.ops.registry import OpDef

Lookup = Callable[[str], "OpDef | None"]


@dataclass
class Arguments:
    """A call's arguments sorted by role; `problems` are (place, message) pairs."""

    tensors: list[Term] = field(default_factory=list)
    attrs: dict[str, Term] = field(default_factory=dict)
    problems: list[tuple[Pos, str]] = field(default_factory=list)


def signature(opdef: OpDef) -> str:
    """`conv2d(x, w, stride=(1, 1), ...)`: how an op is called, for error messages."""
    params = [*opdef.inputs, *(["..."] if opdef.variadic else [])]
    params += [a.name if a.required else f"{a.name}={a.default!r}" for a in opdef.attrs]
    return f"{opdef.name}({', '.join(params)})"


def bind_arguments(opdef: OpDef, call: Call) -> Arguments:
    """Split `call`'s arguments into tensor inputs and attributes, noting what does not fit."""
    out = Arguments()
    n_tensor = len(call.args) if opdef.variadic else min(len(call.args), len(opdef.inputs))
    out.tensors = list(call.args[:n_tensor])
    extra = call.args[n_tensor:]
    if len(extra) > len(opdef.attrs):
        most = len(opdef.inputs) + len(opdef.attrs)
        out.problems.append((extra[len(opdef.attrs)].pos,
                             f"too many arguments: {signature(opdef)} takes at most {most}"))
    for spec, value in zip(opdef.attrs, extra, strict=False):
        out.attrs[spec.name] = value
    key_pos = call.key_pos or tuple(value.pos for _, value in call.kwargs)
    for (key, value), pos in zip(call.kwargs, key_pos, strict=True):
        if opdef.attr_spec(key) is None:
            out.problems.append((pos, f"'{opdef.name}' has no attribute '{key}'"
                                      f"{suggest(key, [a.name for a in opdef.attrs])}"))
        elif key in out.attrs:
            out.problems.append((pos, f"attribute '{key}' of '{opdef.name}' given twice"))
        else:
            out.attrs[key] = value
    if len(out.tensors) < opdef.min_inputs:
        out.problems.append((call.pos, f"'{opdef.name}' needs {opdef.min_inputs} tensor "
                                       f"input(s), got {len(out.tensors)}: {signature(opdef)}"))
    return out


def suggest(name: str, choices) -> str:
    """` (did you mean 'x'?)` for a close match among `choices`, else an empty string."""
    close = difflib.get_close_matches(name, sorted(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def scalar_call(literal: Literal) -> Call:
    """A number where a tensor is expected: `scalar(value=..., dtype=f32|i64|bool)`."""
    value = literal.value
    dtype = "bool" if isinstance(value, bool) else "i64" if isinstance(value, int) else "f32"
    return Call("scalar", (), (("value", literal), ("dtype", Literal(dtype, literal.pos))),
                literal.pos)




def computed_attr(term: Term) -> Builtin | None:
    """An attribute computed from the match (`value(e)`) as the built-in it stands for."""
    if isinstance(term, Call) and term.op in COMPUTED and not term.kwargs:
        return Builtin(term.op, tuple(term.args), term.pos)
    return None


def normalize(term: Term, lookup: Lookup) -> Term:
    """`term` in normal form; it must have passed the checker (every op known)."""
    if isinstance(term, Literal):
        return scalar_call(term)
    if not isinstance(term, Call):
        return term
    opdef = lookup(term.op)
    if opdef is None:
        raise KeyError(term.op)
    bound = bind_arguments(opdef, term)
    args = tuple(normalize(t, lookup) for t in bound.tensors)
    kwargs = tuple((spec.name, _attr(bound.attrs[spec.name]) if spec.name in bound.attrs
                    else Literal(spec.default, term.pos)) for spec in opdef.attrs)
    return Call(term.op, args, kwargs, term.pos)


def _attr(value: Term) -> Term | Builtin:
    return computed_attr(value) or value
