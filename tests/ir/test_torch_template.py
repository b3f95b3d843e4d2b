"""A `torch_op` node's call as plain data: its symbolic sizes as dim text, evaluated per
call without sympy, the same call as the op's reference makes, and the same after JSON."""

from __future__ import annotations

import json
from dataclasses import asdict

import sympy
import torch

from cuvil.ir.torch_template import TorchCall, encode_arg
from cuvil.ir.types import format_dim, sym
from cuvil.ops import get


def dim_text(d):
    return format_dim(d) if isinstance(d, sympy.Expr) else None


ATTRS = {"target": "aten.arange.start_step", "args": (1, 2 * sym("batch") + 1, 2),
         "kwargs": (("dtype", encode_arg(torch.float32)),), "index": None, "out": "f32[batch]"}


def test_a_symbolic_size_is_dim_text_and_evaluated_per_call():
    call = TorchCall.of(ATTRS, dim_text)
    assert call.args == (1, "%dim:2*batch+1", 2)
    for batch in (1, 4, 9):
        got = call.bound({"batch": batch})([])
        want = get("torch_op").ref([], {**ATTRS, "args": (1, 2 * batch + 1, 2)})
        torch.testing.assert_close(got, want)
        assert got.shape == (batch,)


def test_the_call_is_the_same_after_json():
    call = TorchCall.of(ATTRS, dim_text)
    again = TorchCall.from_json(json.loads(json.dumps(asdict(call))))
    assert again == call


def test_tensor_inputs_and_an_indexed_result():
    attrs = {"target": "aten.sort.default", "args": ("$0", 1), "kwargs": (), "index": 1}
    x = torch.randn(3, 5)
    got = TorchCall.of(attrs, dim_text).bound({})([x])
    torch.testing.assert_close(got, torch.sort(x, 1).indices)


def test_what_has_no_plain_form_has_no_call():
    attrs = {**ATTRS, "args": (1, sympy.Rational(1, 2) * sympy.Symbol("x", real=True), 2)}
    assert TorchCall.of(attrs, lambda d: None) is None


def test_a_filler_fills_as_the_template_reads():
    """`filler` (the template read once) gives what `fill_template` gives: inputs in place
    of `$i` at any depth, torch objects and escaped strings decoded, the rest as is; a
    part naming no input is the same value at every call."""
    from cuvil.ir.torch_template import fill_template, filler

    a, b = torch.zeros(2), torch.ones(3)
    template = ("$1", ("$0", 2, ("$1",)), "%torch.float32", "%device:cpu", "%str:$0", None,
                1.5, (3, 4))
    fill = filler(template)
    for tensors in ([a, b], [b, a]):
        got, want = fill(tensors), fill_template(template, tensors)
        assert got == want and got[0] is tensors[1] and got[1][0] is tensors[0]
    assert fill([a, b])[7] is fill([b, a])[7]
    assert filler(("%torch.int64", 2))([]) == (torch.int64, 2)
