"""How a graph's constant is computed from the model's tensors: what a weight swap replays.

A constant of an imported graph is one of the model's tensors (its ref is the tensor's
state-dict path, `fc.weight`) or a tensor computed from constants: folded at import (`w.T`,
`b.bcast`) or by the optimizer (`~fold3`: a Conv+BN weight, a weight quantized to int8).
`Graph.recipes` maps each computed ref to its recipe, a term:

    Ref("fc.weight")                      another constant, by ref
    Call(fn, (Ref("fc.weight"), 0, 1))    fn of its arguments (terms, nested in tuples,
                                          lists and dicts), with every Ref resolved first
    a tensor                              itself (a constant no model tensor feeds)

Terms are plain data: the graph crosses into the optimizer's child process by pickle, so `fn`
is an op or a module-level function, never a closure. `Graph.recipes` is None where the
graph's constants came without them (a graph read from a cache): its constants cannot be
recomputed, and a swap compiles the model afresh instead.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Ref:
    """The constant whose ref is `name`."""

    name: str


@dataclass(frozen=True)
class Call:
    """`fn(*args)`, each argument a term."""

    fn: Callable[..., Any]
    args: tuple = ()


@dataclass(frozen=True)
class TorchOp:
    """A torch op by its name (`aten.erfinv.default`): an op object does not pickle."""

    name: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        namespace, op, overload = self.name.split(".")
        return getattr(getattr(getattr(torch.ops, namespace), op), overload)(*args, **kwargs)


def evaluate(term: Any, lookup: Callable[[str], torch.Tensor]) -> Any:
    """The value of `term`, each `Ref` read through `lookup(name)`."""
    if isinstance(term, Ref):
        return lookup(term.name)
    if isinstance(term, Call):
        args = [evaluate(a, lookup) for a in term.args]
        with torch.no_grad():
            return term.fn(*args)
    if isinstance(term, tuple | list):
        return type(term)(evaluate(t, lookup) for t in term)
    if isinstance(term, dict):
        return {k: evaluate(v, lookup) for k, v in term.items()}
    return term




def resolve(recipes: Mapping[str, Any], given: Mapping[str, torch.Tensor],
            wanted: list[str], rest: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors of refs `wanted`, each ref computed once: a ref in `given` (the model's
    tensors) is that tensor, else its recipe's value, else `rest`'s tensor (a constant no
    model tensor feeds). `LookupError` for a ref none of them has."""
    done: dict[str, torch.Tensor] = {}

    def lookup(ref: str) -> torch.Tensor:
        if ref not in done:
            if ref in given:
                done[ref] = given[ref]
            elif ref in recipes:
                done[ref] = evaluate(recipes[ref], lookup)
            elif ref in rest:
                done[ref] = rest[ref]
            else:
                raise LookupError(f"no tensor or recipe for constant {ref}")
        return done[ref]

    return {ref: lookup(ref) for ref in wanted}


def unknown() -> Any:
    """The recipe of a constant made in a way no term can say: a swap compiles afresh."""
    raise LookupError("a constant without a recipe")


UNKNOWN = Call(unknown)


def apply(fn: Callable[..., Any], args: tuple, kwargs: dict, clone: bool) -> Any:
    """`fn(*args, **kwargs)`; on copies of the tensors with `clone` (an op that may write
    its inputs: they are the model's weights)."""
    if clone:
        args, kwargs = (_cloned(a) for a in (args, kwargs))
    return fn(*args, **kwargs)


def op_term(fn: Any) -> Any:
    """`fn` as a term holds it: a torch op by name (an op object does not pickle)."""
    return TorchOp(str(fn)) if isinstance(fn, torch._ops.OpOverload) else fn


def pickles(term: Any) -> bool:
    """Whether `term` can stand in a graph (it goes to the optimizer's child by pickle)."""
    try:
        pickle.dumps(term)
    except Exception:  # a lambda, a local function, an object pickle refuses
        return False
    return True


def _cloned(tree: Any) -> Any:
    if isinstance(tree, torch.Tensor):
        return tree.clone()
    if isinstance(tree, tuple | list):
        return type(tree)(_cloned(t) for t in tree)
    if isinstance(tree, dict):
        return {k: _cloned(v) for k, v in tree.items()}
    return tree


def transposed(tensor: torch.Tensor, d0: int, d1: int) -> torch.Tensor:
    """`tensor` with dims `d0` and `d1` swapped, C-contiguous (a weight's `w.T`)."""
    return tensor.transpose(d0, d1).contiguous()
