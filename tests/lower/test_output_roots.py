"""An output that reshapes a kernel's result is written by that kernel, not copied at the end;
one that reshapes an input, or a value that is an output too, is still copied; values match
the reference, the reshaped value's other readers included."""

from __future__ import annotations

import torch
from lowering_support import B, assert_matches_reference, t

from cuvil.ir import Graph


def reshaped_output(root_is_output: bool = False, of_input: bool = False) -> Graph:
    """x [batch, 6, 4] -> relu -> transpose [batch, 4, 6] -> unsqueeze -> output, the
    transpose also read by a reduction and an elementwise kernel."""
    g = Graph(f"output_roots_{int(root_is_output)}{int(of_input)}")
    x = g.input("x", t(B, 6, 4))
    tr = g.add("transpose", [g.add("relu", [x])], {"dim0": 1, "dim1": 2})
    root = x if of_input else tr
    shown = g.add("unsqueeze", [root], {"dim": 1})
    total = g.add("sum", [tr], {"dim": (2,), "keepdim": False})
    outs = [shown, total, g.add("exp", [tr])]
    if root_is_output:
        outs.append(tr)
    g.set_outputs(tuple(outs))
    return g


def calls(compiled) -> str:
    """The text of the compiled graph's `entry`."""
    return compiled.source[compiled.source.index("def entry"):]


def test_the_kernel_writes_the_output_it_reshapes_into(lower):
    g = reshaped_output()
    compiled = lower(g)
    entry = calls(compiled)
    assert "np.copyto" not in entry and "o0.reshape((n_batch, 4, 6,))" in entry
    for batch in (1, 3):
        assert_matches_reference(g, compiled, (torch.randn(batch, 6, 4),))


def test_a_reshaped_input_is_copied_into_its_output(lower):
    g = reshaped_output(of_input=True)
    compiled = lower(g)
    assert "np.copyto(o" in calls(compiled)
    assert_matches_reference(g, compiled, (torch.randn(3, 6, 4),))


def test_a_value_returned_whole_and_reshaped_keeps_the_copy(lower):
    g = reshaped_output(root_is_output=True)
    compiled = lower(g)
    assert "np.copyto(o" in calls(compiled)
    assert_matches_reference(g, compiled, (torch.randn(3, 6, 4),))
