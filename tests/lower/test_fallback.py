"""What the CPU target cannot lower runs through torch inside the compiled function and is
reported; with `fallback=False` it is a compile-time error naming op, shape and source."""

from __future__ import annotations

import numpy as np
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


def fallback_outputs_graph(target: str = "aten.cumsum.default", args=("$0", 1)) -> Graph:
    """Outputs: a torch fallback's result, as it is, and a kernel's (relu) after it."""
    g = Graph(f"fallback_output_{target.split('.')[1]}")
    x = g.input("x", t(B, 5))
    c = g.add("torch_op", [x], {"target": target, "args": args, "out": "f32[batch,5]"})
    g.set_outputs((c, g.add("relu", [c])))
    return g


def test_a_fallback_result_that_is_an_output_is_returned_without_a_copy(lower):
    compiled = lower(fallback_outputs_graph())
    assert "= fallbacks[0](in0, o0, own=True)" in compiled.source
    assert "return (o0, o1,)" in compiled.source
    x = torch.randn(3, 5)
    before = x.clone()
    first = compiled(x)
    second = compiled(x)  # the bound path
    for got in (first, second):
        torch.testing.assert_close(got[0], torch.cumsum(before, 1))
        torch.testing.assert_close(got[1], torch.cumsum(before, 1).relu())
    assert first[0].data_ptr() != second[0].data_ptr()  # each call's result its own
    first[0].fill_(7.0)  # writing a returned tensor touches neither the input nor the next
    torch.testing.assert_close(compiled(x)[0], torch.cumsum(before, 1))
    assert torch.equal(x, before)
    assert_matches_reference(fallback_outputs_graph(), compiled, (torch.randn(4, 5),),
                             fallbacks=1)


def test_a_fallback_result_that_views_an_input_is_copied_into_its_output(lower):
    compiled = lower(fallback_outputs_graph("aten.alias.default", ("$0",)))
    x = torch.randn(3, 5)
    before = x.clone()
    for _ in range(2):  # the general path, then the bound one
        out, relu = compiled(x)
        assert not np.shares_memory(out.numpy(), x.numpy())
        out.fill_(7.0)
        assert torch.equal(x, before)
        torch.testing.assert_close(relu, before.relu())


def test_a_profiled_call_returns_the_fallbacks_result(lower):
    compiled = lower(fallback_outputs_graph())
    x = torch.randn(2, 5)
    prof = compiled.profile((x,), runs=2)
    torch.testing.assert_close(prof.outputs[0], torch.cumsum(x, 1))
    torch.testing.assert_close(prof.outputs[1], torch.cumsum(x, 1).relu())
