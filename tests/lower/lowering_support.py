"""Helpers for the lowering tests: compile a hand-built graph, compare with `cuvil.run`."""

from __future__ import annotations

import torch

import cuvil
from cuvil.ir import Graph, TensorType, sym
from cuvil.ir.graph import flatten

B = sym("batch")


def t(*shape, dtype="f32", layout=""):
    return TensorType(shape, dtype, layout)


def outputs(value) -> list[torch.Tensor]:
    """The tensors of an output structure, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [x for v in value.values() for x in outputs(v)]
    return [x for v in value for x in outputs(v)]


def assert_matches_reference(graph: Graph, compiled, inputs, tol: float = 1e-5,
                             fallbacks: int = 0) -> None:
    """The compiled graph's outputs equal the reference executor's (shape, dtype, values).

    Only `fallbacks` nodes may run through torch: the others must have been lowered.
    """
    assert len(compiled.report.fallbacks) == fallbacks, compiled.report.fallbacks
    ref = cuvil.run(graph, *inputs)
    got = compiled(*inputs)
    names = list(flatten(graph.output_structure))
    ref_list, got_list = outputs(ref), outputs(got)
    assert len(ref_list) == len(got_list) == len(names)
    for name, r, g in zip(names, ref_list, got_list, strict=True):
        assert g.shape == r.shape, f"{name}: shape {tuple(g.shape)} != {tuple(r.shape)}"
        assert g.dtype == r.dtype, f"{name}: dtype {g.dtype} != {r.dtype}"
        if r.dtype.is_floating_point:
            torch.testing.assert_close(g, r, atol=tol, rtol=tol, msg=lambda m, n=name: f"{n}: {m}")
        else:
            assert torch.equal(g, r), f"{name}: values differ"


def templates(compiled) -> list[str]:
    return [k.template for k in compiled.report.kernels]


def call_templates(compiled) -> list[str]:
    """The template of each kernel call, in order (calls of one shared kernel each count)."""
    return [s.template for s in compiled.report.steps if s.kind == "kernel"]
