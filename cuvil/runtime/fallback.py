"""Nodes without a kernel run through the op catalog's torch reference, in place.

A fallback gets the physical arrays of its inputs and of its planned output; it views them
as logical torch tensors (an `NHWC` array becomes a channels-last view, no copy), calls the
op's `ref` with the attributes resolved for the current dim sizes, and copies the result
into the output array. Device arrays (a node on `cuda` with no kernel there) are copied to
the host and the result back.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from cuvil.ir.graph import Graph, Node
from cuvil.lower.physical import layout_perm
from cuvil.ops import registry
from cuvil.ops.execute import resolve_attrs
from cuvil.runtime.calling import logical_view


def _host(array) -> np.ndarray:
    """A device array's contents copied to the host (a node of a device that has no kernel
    for it runs on the CPU); a host array as it is."""
    return array.copy_to_host() if hasattr(array, "copy_to_host") else array


def make_fallback(graph: Graph, node: Node, env: dict[str, int]) -> Callable[..., None]:
    opdef = registry.get(node.op, graph.defs)
    attrs = resolve_attrs(node.attrs, env)
    in_perms = [layout_perm(graph[i].type) for i in node.inputs]
    out_perm = layout_perm(node.type)

    def call(*arrays: np.ndarray) -> None:
        *inputs, dest = arrays
        args = [logical_view(_host(a), p) for a, p in zip(inputs, in_perms, strict=True)]
        with torch.no_grad():
            result = opdef.ref(args, attrs)
        if hasattr(dest, "copy_to_device"):  # a node on a device, run here: copy it back
            host = np.empty(dest.shape, dest.dtype)
            logical_view(host, out_perm).copy_(result)
            dest.copy_to_device(host)
        else:
            logical_view(dest, out_perm).copy_(result)

    call.__name__ = f"fallback_{node.op}"
    return call
