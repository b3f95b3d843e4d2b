"""What the CPU target cannot lower runs through torch inside the compiled function and is
reported; with `fallback=False` it is a compile-time error naming op, shape and source."""

from __future__ import annotations

import pytest
import torch
from lowering_support import B, assert_matches_reference, t, templates

from cuvil.errors import CuvilError
from cuvil.ir import Graph


def cumsum_graph() -> Graph:
    g = Graph("cumsum")
    x = g.input("x", t(B, 5))
    h = g.add("relu", [x])
    c = g.add("torch_op", [h], {"target": "aten.cumsum.default", "args": ("$0", 1),
                                "out": "f32[batch,5]"}, source="model.py:7")
    g.set_outputs(g.add("mul", [c, g.scalar(2.0)]))
    return g


def test_torch_op_runs_inside_the_compiled_function(lower):
    g = cumsum_graph()
    compiled = lower(g)
    assert templates(compiled) == ["elementwise", "elementwise"]
    (fb,) = compiled.report.fallbacks
    assert (fb.op, fb.shape, fb.source) == ("torch_op aten.cumsum.default", "f32[batch,5]",
                                           "model.py:7")
    assert "fallback to torch" in str(compiled.report)
    for batch in (1, 4):
        assert_matches_reference(g, compiled, (torch.randn(batch, 5),), fallbacks=1)


def test_fallback_false_names_op_shape_and_source(lower):
    with pytest.raises(CuvilError) as e:
        lower(cumsum_graph(), fallback=False)
    message = str(e.value)
    assert "aten.cumsum.default" in message and "f32[batch,5]" in message
    assert "model.py:7" in message and "\n" not in message


def test_half_precision_falls_back_with_its_reason(lower):
    g = Graph("half")
    x = g.input("x", t(B, 4, dtype="f16"))
    g.set_outputs(g.add("relu", [x]))
    compiled = lower(g)
    assert "f16" in compiled.report.fallbacks[0].reason
    assert_matches_reference(g, compiled, (torch.randn(3, 4).half(),), fallbacks=1)


def test_fallbacks_see_nhwc_values_in_logical_order(lower):
    g = Graph("nhwc_fallback")
    x = g.input("x", t(B, 3, 4, 5))
    h = g.add("to_layout", [g.add("relu", [x])], {"layout": "NHWC"})
    c = g.add("torch_op", [h], {"target": "aten.flip.default", "args": ("$0", (1,)),
                                "out": "f32[batch,3,4,5]:NHWC"})
    g.set_outputs(g.add("add", [c, x]))
    assert_matches_reference(g, lower(g), (torch.randn(2, 3, 4, 5),), fallbacks=1)


def test_unknown_target_is_a_clear_error(lower):
    with pytest.raises(CuvilError, match="unknown target 'tpu'.*cpu"):
        lower(cumsum_graph(), target="tpu")
