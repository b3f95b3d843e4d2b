"""Cuvil as a `torch.compile` backend: `torch.compile(model, backend="cuvil")`.

Dynamo captures graphs (breaking them where Python cannot be traced, guarding and
recompiling on new shapes: all Dynamo's); AOTAutograd turns each into a functional aten
forward graph and, when a gradient is wanted, a backward graph (its min-cut partitioner
chooses the saved activations); Cuvil compiles each of them (`compiler.py`:
`compile_graph` is a compiler for `aot_autograd` of one's own, too). A training graph that
needs none of AOTAutograd's runtime layers is called without them (`direct.py`). Options pass
through: `torch.compile(model, backend="cuvil", options={"rules": ..., "target": ...})`
takes `cuvil.compile`'s keyword arguments. A graph AOTAutograd cannot trace (an op with no
derivative, where a gradient is wanted) runs in eager PyTorch with one warning naming the op
and its source line; its backward then raises what eager raises. `COUNTS` counts the graphs
Cuvil compiled ("compiles") and those it refused, which run in eager PyTorch with a warning
("eager").

The backend is registered by the `torch_dynamo_backends` entry point (pyproject.toml), so
`backend="cuvil"` works without importing Cuvil, and by importing this module.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from torch import fx

from cuvil.dynamo.compiler import compile_graph
from cuvil.dynamo.graphs import COUNTS

__all__ = ["COUNTS", "backend", "compile_graph", "register"]


def backend(gm: fx.GraphModule, example_inputs: Sequence[Any], *,
            options: dict | None = None) -> Callable:
    """The `torch.compile` backend: each graph through AOTAutograd, then Cuvil."""
    from functorch.compile import min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd

    from cuvil.dynamo.compiler import dynamo_acts_on, untraced, where
    from cuvil.dynamo.direct import Split, direct_call

    options = dict(options or {})

    def compiler(kind: str) -> Callable:
        return functools.partial(compile_graph, options=options, kind=kind, source=where(gm))

    split = Split()
    compiled = aot_autograd(fw_compiler=split.forward_compiler(compiler("forward")),
                            bw_compiler=compiler("backward"),
                            inference_compiler=compiler("inference"),
                            partition_fn=split.partition(min_cut_rematerialization_partition))
    try:
        through_aot = compiled(gm, example_inputs)
    except Exception as e:  # AOTAutograd's trace (an op with no derivative): eager, warned
        if dynamo_acts_on(e):
            raise
        return untraced(gm, e)
    return direct_call(gm, example_inputs, split, compiler("backward")) or through_aot


def register() -> None:
    """Register `backend` as "cuvil" with torch._dynamo, unless it is registered or its
    entry point is being loaded (torch registers what that returns)."""
    from torch._dynamo.backends import registry

    if "cuvil" not in registry._COMPILER_FNS and registry._BACKENDS.get("cuvil") is None:
        registry.register_backend(backend, name="cuvil")


register()
