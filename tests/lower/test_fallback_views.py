"""A move that only torch fallbacks read reaches them as a strided view, not a copy; one
that a kernel reads too, or that is an output, stays a copy; values match the reference."""

from __future__ import annotations

import torch
from lowering_support import B, assert_matches_reference, call_templates, t

from cuvil.ir import Graph

CUMSUM = {"target": "aten.cumsum.default", "args": ("$0", 2), "out": "f32[batch,4,6]"}


def transposed_into_fallback(also_kernel: bool = False, as_output: bool = False) -> Graph:
    """x [batch, 6, 4] -> relu -> transpose (and a select of a slice of it) -> torch's cumsum;
    the transpose also read by a kernel, or also an output, where asked. Kernels between
    the relu and the fallbacks write buffers of its size: the relu's must live on until the
    fallbacks have read their views of it."""
    g = Graph(f"fallback_views_{int(also_kernel)}{int(as_output)}")
    x = g.input("x", t(B, 6, 4))
    h = g.add("relu", [x])
    tr = g.add("transpose", [h], {"dim0": 1, "dim1": 2})
    soft = g.add("softmax", [g.add("neg", [x])], {"dim": -1})
    between = g.add("softmax", [g.add("exp", [soft])], {"dim": -2})
    c = g.add("torch_op", [tr], CUMSUM)
    sl = g.add("slice", [tr], {"dim": 2, "start": 1, "end": 5, "step": 2})
    sel = g.add("select", [sl], {"dim": 1, "index": 3})
    s = g.add("torch_op", [sel], {"target": "aten.neg.default", "args": ("$0",),
                                  "out": "f32[batch,2]"})
    outs = [g.add("mul", [c, g.scalar(2.0)]), g.add("relu", [s]), between]
    if also_kernel:
        outs.append(g.add("exp", [tr]))
    if as_output:
        outs.append(tr)
    g.set_outputs(tuple(outs))
    return g


def test_a_move_only_fallbacks_read_is_passed_as_a_view(lower):
    g = transposed_into_fallback()
    compiled = lower(g)
    assert "copy" not in call_templates(compiled)
    assert "copy_into" not in compiled.source
    assert ".transpose((0, 2, 1))" in compiled.source
    for batch in (1, 3):
        assert_matches_reference(g, compiled, (torch.randn(batch, 6, 4),), fallbacks=2)


def test_a_move_a_kernel_reads_too_stays_a_copy(lower):
    g = transposed_into_fallback(also_kernel=True)
    compiled = lower(g)
    assert call_templates(compiled).count("copy") == 1
    assert_matches_reference(g, compiled, (torch.randn(3, 6, 4),), fallbacks=2)


def test_a_move_that_is_an_output_stays_a_copy(lower):
    g = transposed_into_fallback(as_output=True)
    compiled = lower(g)
    assert call_templates(compiled).count("copy") == 1
    assert_matches_reference(g, compiled, (torch.randn(3, 6, 4),), fallbacks=2)
