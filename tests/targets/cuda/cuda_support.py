"""What the CUDA kernel tests share: graphs computed on `cuda` between two transfers, and
the check of a compiled graph against the reference executor (`cuvil.run`)."""

from __future__ import annotations

import torch

import cuvil
from cuvil.ir import Graph, TensorType


def t(*shape, dtype="f32"):
    return TensorType(shape, dtype)


def on_cuda(shapes, build, name="cuda_case") -> Graph:
    """A graph: inputs of `shapes` moved to cuda, `build(g, *values)` there, moved back."""
    g = Graph(name)
    xs = [g.add("to_device", [g.input(f"x{i}", t(*s))], {"device": "cuda"})
          for i, s in enumerate(shapes)]
    result = build(g, *xs)
    g.set_outputs(g.add("to_device", [result], {"device": "cpu"}))
    return g


def check(g: Graph, shapes, lower, templates: set[str], fallbacks: int = 0):
    compiled = lower(g, target=["cuda", "cpu"])
    assert len(compiled.report.fallbacks) == fallbacks, compiled.report.fallbacks
    placed = compiled.report.placement
    on_gpu = {k.template for k in compiled.report.kernels if placed[k.name] == "cuda"}
    assert templates <= on_gpu, (on_gpu, compiled.source)
    inputs = [torch.randn(*s, generator=torch.Generator().manual_seed(i))
              for i, s in enumerate(shapes)]
    torch.testing.assert_close(compiled(*inputs), cuvil.run(g, *inputs), atol=1e-5, rtol=1e-5)
    return compiled
