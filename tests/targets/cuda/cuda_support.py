"""What the CUDA kernel tests share: graphs computed on `cuda` between two transfers, and
the check of a compiled graph against the reference executor (`cuvil.run`)."""

from __future__ import annotations

from functools import cache

import torch

import cuvil
import cuvil.library
from cuvil.ir import Graph, TensorType


def t(*shape, dtype="f32"):
    return TensorType(shape, dtype)


def on_cuda(shapes, build, name="cuda_case", dtypes=None, defs=None) -> Graph:
    """A graph: inputs of `shapes` (f32, or `dtypes`) moved to cuda, `build(g, *values)`
    there, moved back; `defs`: the composite ops it may use (`stock_ops()`)."""
    g = Graph(name)
    g.defs = dict(defs or {})
    dtypes = dtypes or ["f32"] * len(shapes)
    xs = [g.add("to_device", [g.input(f"x{i}", t(*s, dtype=d))], {"device": "cuda"})
          for i, (s, d) in enumerate(zip(shapes, dtypes, strict=True))]
    result = build(g, *xs)
    g.set_outputs(g.add("to_device", [result], {"device": "cpu"}))
    return g


@cache
def stock_ops() -> dict:
    """The composite ops of the stock rule library (`mlp_relu`, `linear_relu`, ...)."""
    return dict(cuvil.library.load().ops)


def check(g: Graph, shapes, lower, templates: set[str], fallbacks: int = 0, inputs=None):
    """`g` compiled for ["cuda", "cpu"]: `templates` among its CUDA kernels, `fallbacks`
    fallbacks, the result of `inputs` (random normal ones of `shapes` by default) that of
    the reference executor."""
    compiled = lower(g, target=["cuda", "cpu"])
    assert len(compiled.report.fallbacks) == fallbacks, compiled.report.fallbacks
    placed = compiled.report.placement
    on_gpu = {k.template for k in compiled.report.kernels if placed[k.name] == "cuda"}
    assert templates <= on_gpu, (on_gpu, compiled.source)
    inputs = inputs or [torch.randn(*s, generator=torch.Generator().manual_seed(i))
                        for i, s in enumerate(shapes)]
    torch.testing.assert_close(compiled(*inputs), cuvil.run(g, *inputs), atol=1e-5, rtol=1e-5)
    return compiled
