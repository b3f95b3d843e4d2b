"""Composite ops (`op NAME(params) = BODY` in `.cvr`) replaced by the primitive nodes of
their bodies, so that every later stage of lowering sees only catalog ops.

A composite of f16 or bf16 values stays one node (`runs_in_torch`), but for f16 on a device
whose kernels compute it.

The inlined nodes of one composite node are remembered as an `Instance`, with the kernel
family its op's `kernel` clause names: grouping makes an instance one kernel of that family
when its nodes fit the family (`cuvil.lower.group`), and the kernel's header names the
composite node, its source line and the rules that produced it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cuvil.dsl.ast import Call, Literal, Var, Wildcard
from cuvil.errors import CuvilError
from cuvil.ir.graph import Graph, Node
from cuvil.ir.types import DType
from cuvil.lower.physical import kernel_dtype
from cuvil.ops import registry

LOW_PRECISION = (DType.f16, DType.bf16)


@dataclass
class Instance:
    """The primitive nodes one composite node became (its own name is the last one's)."""

    node: Node  # the composite node as it was in the graph
    members: list[str] = field(default_factory=list)
    kernel: str = ""  # the kernel family of its op (`OpDef.kernel`); "": lowered as parts


def is_composite(graph: Graph, op: str) -> bool:
    opdef = graph.defs.get(op)
    return opdef is not None and opdef.kind == registry.COMPOSITE and opdef.body is not None


def runs_in_torch(graph: Graph, node: Node) -> bool:
    """Whether composite `node` stays whole, one torch fallback computed in f32 and rounded
    on store (`runtime.fallback`): its result or an operand is f16 or bf16, which kernels
    do not handle (f16 on a device with f16 kernels is inlined). Inlined, each part would
    round, where torch's `addmm` rounds once."""
    types = [graph[i].type for i in node.inputs] + [node.type]
    return any(t.dtype in LOW_PRECISION and not kernel_dtype(t.dtype, t.device) for t in types)


def inline_composites(graph: Graph) -> tuple[Graph, dict[str, Instance]]:
    """A copy of `graph` without composite nodes, and the instance of each one inlined."""
    out = Graph(graph.name)
    out.report = graph.report
    out.constants = dict(graph.constants)
    out.recipes = graph.recipes
    out.defs = dict(graph.defs)
    out._counter = graph._counter
    instances: dict[str, Instance] = {}
    for node in graph:
        if node.op == "input":
            out.input(node.name, node.type)
        elif is_composite(graph, node.op) and not runs_in_torch(graph, node):
            inst = Instance(node, kernel=graph.defs[node.op].kernel)
            _expand(out, node, node, inst)
            instances[node.name] = inst
        else:
            out._put(node)
    out.set_outputs(graph.output_structure)
    out.set_mutations(graph.mutations)
    return out, instances


def _expand(g: Graph, node: Node, top: Node, inst: Instance, depth: int = 0) -> str:
    """Append the body of composite `node` to `g`; the result value is named `node.name`."""
    if depth > 32:
        raise CuvilError(f"{top.where()}: composite ops nest too deeply")
    opdef = g.defs[node.op]
    decl = opdef.body
    tensors = [i.rstrip("?") for i in opdef.inputs]
    env: dict[str, Any] = {}
    for name, value in zip(tensors, node.inputs, strict=False):
        env[name] = ("tensor", value)
    for spec in opdef.attrs:
        env[spec.name] = ("attr", node.attrs.get(spec.name, spec.default))
    for p in decl.params:
        if p not in env:
            raise CuvilError(f"{top.where()}: {node.op} parameter {p!r} has no value")
    return _term(g, decl.body, env, node.name, top, inst, depth)


def _term(g: Graph, term, env: dict[str, Any], name: str | None, top: Node, inst: Instance,
          depth: int) -> str:
    """Emit `term` as nodes; returns the value name (a `name` given is used for the root)."""
    if isinstance(term, Var):
        kind, value = env[term.name]
        if kind == "tensor":
            return value if name is None else _copy_as(g, value, name, top, inst)
        return _scalar(g, value, name, top, inst)
    if isinstance(term, Literal):
        return _scalar(g, term.value, name, top, inst)
    if isinstance(term, Wildcard) or not isinstance(term, Call):
        raise CuvilError(f"{top.where()}: cannot inline {term!r}")
    opdef = registry.get(term.op, g.defs)
    n_tensors = len(term.args) if opdef.variadic else min(len(opdef.inputs), len(term.args))
    if term.op == "scalar":
        n_tensors = 0
    inputs = [_term(g, a, env, None, top, inst, depth) for a in term.args[:n_tensors]]
    attrs = {}
    for spec, arg in zip(opdef.attrs, term.args[n_tensors:], strict=False):
        attrs[spec.name] = _attr(arg, env, top)
    for key, arg in term.kwargs:
        attrs[key] = _attr(arg, env, top)
    out_name = name or g.fresh(f"{top.name}_")
    if is_composite(g, term.op):
        attrs = opdef.complete_attrs(attrs, top.where())
        t = registry.infer(term.op, [g[i].type for i in inputs], attrs, top.source, g.defs)
        node = Node(out_name, term.op, tuple(inputs), attrs, t, top.source, top.origin)
        return _expand(g, node, top, inst, depth + 1)
    g.add(term.op, inputs, attrs, name=out_name, source=top.source, origin=top.origin)
    inst.members.append(out_name)
    return out_name


def _attr(term, env: dict[str, Any], top: Node) -> Any:
    if isinstance(term, Literal):
        return term.value
    if isinstance(term, Var) and env.get(term.name, ("", None))[0] == "attr":
        return env[term.name][1]
    raise CuvilError(f"{top.where()}: attribute argument {term!r} is not a constant")


def _scalar(g: Graph, value: Any, name: str | None, top: Node, inst: Instance) -> str:
    out = name or g.fresh(f"{top.name}_s")
    g.scalar(value, name=out)
    inst.members.append(out)
    return out


def _copy_as(g: Graph, value: str, name: str, top: Node, inst: Instance) -> str:
    """A body that is a bare parameter: the result is the input itself (a free view)."""
    g.add("reshape", [value], {"shape": g[value].type.shape}, name=name, source=top.source,
          origin=top.origin)
    inst.members.append(name)
    return name
