"""Functional programs: no op the importer sees writes a tensor in place.

torch.export's default IR keeps in-place ops (`relu_`, `add_`, `copy_`, writes through a
view such as `y[:, :2].add_(1)`). The import's functionalize pass (`functionalize`, between
export and convert) makes the captured program functional: `functional(program)` runs
torch's functionalization on a program that has one: `run_decompositions({})`, with an
empty table, so that conv2d, linear, layer_norm, gelu and the rest stay whole. Each
in-place op becomes its functional form, a write through a view becomes `slice_scatter` /
`select_scatter` of the new values into the base, and a write into a user input becomes an
output of kind USER_INPUT_MUTATION naming that input: the compiled call writes that value
into the caller's tensor, as the model does (`written_inputs`). A program without an
in-place op is returned as it is, so its import is unchanged.

Whether `contiguous` or `reshape` returns a view or a copy depends on the sizes: the
transpose of a 1 x n tensor is contiguous already. torch.export traces a dynamic dim of
size 1 as 2, so a model that writes in place into such a result, or into what it came from
after it, may share memory with the other at size 1 where the trace did not
(`size_dependent_alias`): `frontend/export.py` compiles such a model for sizes of 2 and up.

A module that writes its own buffer in forward (a running count, a cache) is refused:
eager changes the module's buffer on every call, which a compiled call does not do.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from cuvil.errors import CuvilError
from cuvil.frontend.values import Exported, Traced, UserInput, Weight


class InternalError(AssertionError):
    """A bug in Cuvil, not in the model: a step broke what the next one relies on."""


def mutating(node: fx.Node) -> bool:
    """Whether `node` is an aten op that writes one of its arguments (in-place, `out=`)."""
    target = node.target
    return node.op == "call_function" and isinstance(target, torch._ops.OpOverload) and \
        target._schema.is_mutable


def first_mutation(graph: fx.Graph) -> fx.Node | None:
    return next((n for n in graph.nodes if mutating(n)), None)


def functionalize(exported: Exported) -> Traced:
    """The functional form of `exported` (`functional`), with what its placeholders and
    outputs stand for; a retraced GraphModule (no in-place op) as it is."""
    if exported.program is None:
        return replace(exported.retraced, notes=list(exported.notes))
    name = exported.name or "the program"
    program = functional(exported.program, name)
    writes = written_inputs(program, name)
    leaves = leaves_of(program)
    output = next(n for n in program.graph.nodes if n.op == "output")
    flat = [v for v, s in zip(output.args[0], program.graph_signature.output_specs, strict=True)
            if s.kind is OutputKind.USER_OUTPUT]
    return Traced(exported.name or "exported", program.graph, leaves, flat,
                  program.call_spec.out_spec, dim_names=exported.dim_names,
                  ranges=dict(program.range_constraints), notes=exported.notes, writes=writes,
                  size_alias=exported.size_alias)


def leaves_of(program: ExportedProgram) -> dict[str, UserInput | Weight]:
    """What each input placeholder of `program` stands for: a user input, or a weight."""
    leaves: dict[str, UserInput | Weight] = {}
    index = 0
    for spec in program.graph_signature.input_specs:
        arg = spec.arg.name
        if spec.kind is InputKind.USER_INPUT:
            leaves[arg] = UserInput(arg, index)
            index += 1
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            table = program.state_dict if spec.target in program.state_dict else (
                program.constants)
            leaves[arg] = Weight(table[spec.target], spec.target)
        else:
            raise CuvilError(f"cannot import an input of kind {spec.kind.name} ({arg})")
    return leaves


def functional(program: ExportedProgram, name: str) -> ExportedProgram:
    """`program` with every in-place op replaced by its functional form (see above)."""
    if first_mutation(program.graph) is None:
        return program
    refuse_overlapping_writes(program.graph, name)
    try:
        return program.run_decompositions({})
    except Exception as e:  # torch raises many kinds; the first line says it
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CuvilError(f"cannot functionalize {name}'s program (it writes a tensor in "
                         f"place): {first}") from None


def refuse_overlapping_writes(graph: fx.Graph, name: str) -> None:
    """A CuvilError for an in-place op that writes a tensor whose elements share memory (a
    view through `expand`): eager writes each shared location once, while functionalization
    computes the write as if the copies were distinct, a different value."""
    for node in filter(mutating, graph.nodes):
        for arg in _written(node):
            value = arg.meta.get("val") if isinstance(arg, fx.Node) else None
            if isinstance(value, torch.Tensor) and _overlaps(value):
                raise CuvilError(
                    f"cannot compile {name}: {node.target} at {_where(node)} writes in "
                    f"place into {arg.name}, a view whose elements share memory (shape "
                    f"{tuple(value.shape)}, strides {tuple(value.stride())}, as `expand` "
                    "makes); clone() it before writing")


# ops that return a view of their input at some sizes and a copy at others
_MAYBE_VIEW = {"aten::contiguous", "aten::reshape", "aten::flatten", "aten::reshape_as"}


def size_dependent_alias(graph: fx.Graph) -> str | None:
    """Where a tensor is read after an in-place op wrote memory it may share through an
    earlier op of `_MAYBE_VIEW` (its input and result, through views on either side), the
    caller's input among them; None where no read can tell whether that op made a view or
    a copy."""
    base: dict[fx.Node, fx.Node] = {}  # a view -> the tensor whose memory it shares
    sides: dict[fx.Node, frozenset] = {}  # a tensor -> the maybe-views between it and its root
    writes: list[tuple[fx.Node, fx.Node, frozenset]] = []  # (write, root, side written)

    def root(node):
        while node in base:
            node = base[node]
        return node

    order = {node: i for i, node in enumerate(graph.nodes)}
    for node in graph.nodes:
        for read in node.all_input_nodes:
            hit = next((w for w, r, side in writes if root(read) is r and any(
                order[v] < order[w] for v in sides.get(read, frozenset()) ^ side)), None)
            if hit is not None and read is not hit:
                return f"{hit.target} at {_where(hit)} writes memory that {read.name} may share"
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        viewed = [a for a in _aliased(node) if isinstance(a, fx.Node)]
        for arg in viewed:
            if root(arg) is not root(node):
                base[root(node)] = root(arg)
        own = frozenset({node}) if node.target._schema.name in _MAYBE_VIEW else frozenset()
        sides[node] = (sides.get(viewed[0], frozenset()) if viewed else frozenset()) | own
        if mutating(node) and not _no_op(node):
            writes += [(node, root(a), sides.get(a, frozenset()))
                       for a in _written(node) if isinstance(a, fx.Node)]
    hit = next((w for w, r, side in writes if r.op == "placeholder" and any(
        order[v] < order[w] for v in side)), None)
    return None if hit is None else (
        f"{hit.target} at {_where(hit)} writes memory that input {root(hit).name} may share")


def _no_op(node: fx.Node) -> bool:
    """An in-place op that leaves its tensor as it is: dropout outside training."""
    return node.target._schema.name.endswith("dropout_") and node.args[2:3] == (False,)


def _aliased(node: fx.Node) -> list:
    """The arguments whose memory `node`'s result shares (its schema's `Tensor(a)` ones)."""
    schema = node.target._schema
    sets = {s for r in schema.returns if r.alias_info is not None for s in r.alias_info.before_set}
    return [node.args[i] if i < len(node.args) else node.kwargs.get(a.name)
            for i, a in enumerate(schema.arguments)
            if a.alias_info is not None and sets & set(a.alias_info.before_set)]


def _written(node: fx.Node) -> list:
    """The arguments an in-place op writes (its schema's `Tensor(a!)` ones)."""
    schema = node.target._schema
    return [node.args[i] if i < len(node.args) else node.kwargs.get(a.name)
            for i, a in enumerate(schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write]


def _overlaps(value: torch.Tensor) -> bool:
    try:
        return torch._debug_has_internal_overlap(value) == 1  # 1: yes; 2: too hard to tell
    except Exception:  # a symbolic size torch cannot decide: assume no overlap
        return False


def written_inputs(program: ExportedProgram, name: str) -> dict[str, Any]:
    """Input placeholder name -> the output node whose value the model writes into it;
    a CuvilError for a buffer the model writes, or any output that is not the user's."""
    output = next(n for n in program.graph.nodes if n.op == "output")
    writes = {}
    for value, spec in zip(output.args[0], program.graph_signature.output_specs, strict=True):
        if spec.kind is OutputKind.USER_INPUT_MUTATION:
            writes[spec.target] = value
        elif spec.kind is OutputKind.BUFFER_MUTATION:
            raise CuvilError(f"cannot compile {name}: its forward writes buffer "
                             f"{spec.target!r} in place, which a compiled call would not "
                             "do; compute the new value outside forward, or return it")
        elif spec.kind is not OutputKind.USER_OUTPUT:
            raise CuvilError(f"cannot compile {name}: its program has an output of kind "
                             f"{spec.kind.name} ({spec.target or spec.arg})")
    return writes


def refuse_mutation(graph: fx.Graph, name: str, why: str) -> None:
    """A CuvilError naming the first in-place op of `graph`, if it has one."""
    node = first_mutation(graph)
    if node is not None:
        raise CuvilError(f"cannot import {name}: {node.target} at {_where(node)} writes a "
                         f"tensor in place, and {why}")


def assert_functional(node: fx.Node) -> None:
    """An internal error if an in-place op reaches the importer (functional() removes them)."""
    if mutating(node):
        raise InternalError(f"internal error: in-place op {node.target} at {_where(node)} "
                            "reached the importer; its program should be functional")


def _where(node: fx.Node) -> str:
    from cuvil.frontend.report import source_of

    return str(source_of(node))
