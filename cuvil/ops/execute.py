"""The reference executor: runs any Cuvil graph with the catalog's torch implementations.

This is the semantic ground truth that optimized and compiled graphs are checked against.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy
import torch

from cuvil.errors import CuvilError
from cuvil.ir.dim_text import bind_shapes
from cuvil.ir.graph import Graph
from cuvil.ir.types import DType, TensorType, format_dim, is_static


def as_tensor(value: Any, name: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray | np.generic):
        return torch.from_numpy(np.asarray(value))
    raise CuvilError(f"input {name!r}: expected a torch tensor or numpy array, "
                     f"got {type(value).__name__}")


def bind_symbols(params: list[tuple[str, TensorType]], shapes: list[tuple[int, ...]],
                 dtypes: list[DType] | None = None, ranges=None) -> dict[str, int]:
    """Sizes of the symbolic dims, read off the inputs; a clear error on any mismatch or
    size outside `ranges` (the compiled call binds the same way: `ir.dim_text.bind_shapes`)."""
    texts = [(name, tuple(d if is_static(d) else format_dim(d) for d in t.shape),
              t.dtype.value) for name, t in params]
    return bind_shapes(texts, shapes, None if dtypes is None else [d.value for d in dtypes],
                       ranges)


def _bound(env: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in env.items()) or "all dims static"


def _resolve(d, env: dict[str, int]) -> int | None:
    if is_static(d):
        return d
    value = sympy.sympify(d).subs({s: env.get(str(s), s) for s in d.free_symbols})
    return int(value) if value.is_Integer else None


def resolve_attrs(value: Any, env: dict[str, int]) -> Any:
    """Attributes with every symbolic dim replaced by its size."""
    if isinstance(value, dict):
        return {k: resolve_attrs(v, env) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(resolve_attrs(v, env) for v in value)
    if isinstance(value, sympy.Basic):
        resolved = _resolve(value, env)
        if resolved is None:
            raise CuvilError(f"dim {format_dim(value)} is unknown with {_bound(env)}")
        return resolved
    return value


def input_tensors(graph: Graph, inputs: tuple[Any, ...]) -> tuple[list[torch.Tensor], dict]:
    """Check `inputs` against the graph's input types; return them as tensors and the env."""
    if len(inputs) != len(graph.inputs):
        raise CuvilError(f"expected {len(graph.inputs)} input(s) "
                         f"({', '.join(graph.inputs)}), got {len(inputs)}")
    tensors = [as_tensor(v, n) for v, n in zip(inputs, graph.inputs, strict=True)]
    params = [(n, graph[n].type) for n in graph.inputs]
    env = bind_symbols(params, [tuple(t.shape) for t in tensors],
                       [DType.from_torch(t.dtype) for t in tensors], graph.dim_ranges)
    return tensors, env


def evaluate(graph: Graph, inputs: tuple[Any, ...]) -> dict[str, torch.Tensor]:
    """Every value of the graph, computed by reference implementations."""
    from cuvil.ops import registry

    tensors, env = input_tensors(graph, inputs)
    values: dict[str, torch.Tensor] = dict(zip(graph.inputs, tensors, strict=True))
    for node in graph:
        if node.op == "input":
            continue
        if node.op == "const":
            values[node.name] = graph.constants[node.attrs["ref"]]
            continue
        opdef = registry.get(node.op, graph.defs)
        args = [values[i] for i in node.inputs]
        weak = [i for i, name in enumerate(node.inputs) if graph[name].type.weak]
        for i in weak:
            number = graph[node.inputs[i]].attrs.get("value")
            args[i] = registry.weak_operand(args[i], number, node.type)
        value = opdef.ref(args, resolve_attrs(node.attrs, env))
        if weak:
            value = registry.weak_result(value, node.type)
        values[node.name] = value
    return values


def run(graph: Graph, *inputs: Any) -> Any:
    """Run `graph` on torch tensors or numpy arrays; returns the model's output structure,
    and writes into each input the model writes in place what it writes (`mutations`)."""
    with torch.no_grad():
        values = evaluate(graph, inputs)
        for name, value in graph.mutations.items():
            as_tensor(inputs[graph.inputs.index(name)], name).copy_(values[value])
    return graph.rebuild_outputs(values)
