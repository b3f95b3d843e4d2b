"""Nodes without a kernel run through the op catalog's torch reference.

A fallback gets the physical arrays of its inputs and of its planned output; it views them
as logical torch tensors (an `NHWC` array becomes a channels-last view, no copy), calls the
op's `ref` with the attributes resolved for the current dim sizes, and returns the array
that holds the result: torch's own memory where it is laid out as planned, else the output
array with the result copied in (`calling.settle`). Device arrays (a node on `cuda` with
no kernel there) are copied to the host and the result back.

A composite op of f16 or bf16 values (kept whole, `lower.inline.runs_in_torch`) is computed
in f32 and rounded on store.

An input may be the caller's tensor or a constant, which the runtime never writes: an op
not known to leave its inputs alone gets copies of them (`calling.private`). The catalog's
own references are known pure (they are Cuvil's, written as functions of their inputs),
and so is a `torch_op` of an aten op whose schema writes no argument
(`ir.torch_template.known_pure`); a custom op's or a user-registered reference is not.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from cuvil.ir.graph import Graph, Node
from cuvil.ir.torch_template import known_pure
from cuvil.lower.inline import runs_in_torch
from cuvil.lower.physical import layout_perm
from cuvil.ops import registry
from cuvil.ops.execute import resolve_attrs
from cuvil.runtime.calling import logical_view, private, settle, storages_of


def _host(array) -> np.ndarray:
    """A device array's contents copied to the host (a node of a device that has no kernel
    for it runs on the CPU); a host array as it is."""
    return array.copy_to_host() if hasattr(array, "copy_to_host") else array


def ref_is_pure(opdef: registry.OpDef, node: Node) -> bool:
    """Whether `node`'s reference is known to write none of its inputs."""
    if node.op == "torch_op":
        return known_pure(node.attrs["target"])
    return getattr(opdef.ref, "__module__", "").startswith("cuvil.")


def _in_f32(ref: Callable, dtype: torch.dtype) -> Callable:
    """`ref` computed in f32 from its floating inputs and rounded to `dtype` once, on store,
    as torch's CPU kernels compute f16 and bf16 (`linear` is one `addmm`, not a rounded
    product plus a bias)."""

    def run(args: list[torch.Tensor], attrs: dict) -> torch.Tensor:
        wide = [a.float() if a.is_floating_point() else a for a in args]
        return ref(wide, attrs).to(dtype)

    return run


def make_fallback(graph: Graph, node: Node, env: dict[str, int]) -> Callable[..., None]:
    opdef = registry.get(node.op, graph.defs)
    pure = ref_is_pure(opdef, node)
    ref = opdef.ref
    if opdef.kind == registry.COMPOSITE and runs_in_torch(graph, node):
        ref = _in_f32(ref, node.type.dtype.torch)
    attrs = resolve_attrs(node.attrs, env)
    in_perms = [layout_perm(graph[i].type) for i in node.inputs]
    out_perm = layout_perm(node.type)

    def call(*arrays: np.ndarray, own: bool = False):
        *inputs, dest = arrays
        args = private([logical_view(_host(a), p) for a, p in
                        zip(inputs, in_perms, strict=True)], pure)
        with torch.no_grad():
            result = ref(args, attrs)
            if not hasattr(dest, "copy_to_device"):
                return settle(result, dest, out_perm, storages_of(args) if own else frozenset(),
                              own)
        host = np.empty(dest.shape, dest.dtype)  # a node on a device, run here: copy it back
        logical_view(host, out_perm).copy_(result)
        dest.copy_to_device(host)
        return dest

    call.__name__ = f"fallback_{node.op}"
    return call
