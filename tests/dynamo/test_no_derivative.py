"""tests/dynamo/test_no_derivative.py: an op with no derivative, where a gradient is
wanted, makes AOTAutograd's trace fail; the backend then runs Dynamo's graph in eager
PyTorch with one warning naming the op and the source line that calls it, so the forward
matches eager and the backward raises what eager raises (never a wrong gradient)."""

from __future__ import annotations

import re

import pytest
import torch

from cuvil.dynamo import COUNTS


@torch.library.custom_op("cuvil_test::cube", mutates_args=())
def cube(x: torch.Tensor) -> torch.Tensor:
    """An op with a forward and no autograd formula registered."""
    return x * x * x


@cube.register_fake
def _(x):
    return torch.empty_like(x)


def custom(x):
    return cube(x.sin()).sum()  # the line the warning names


def igamma(x, y):
    return torch.igamma(x.exp(), y).sum()  # igamma's derivative in its input: none


def _line_of(fn) -> int:
    return fn.__code__.co_firstlineno + 1


@pytest.mark.parametrize("fn, op", [(custom, "cuvil_test.cube.default"), (igamma, "igamma")],
                         ids=["custom-op", "igamma"])
def test_an_op_with_no_derivative_runs_in_eager_with_a_warning_naming_it(fn, op):
    x, y = torch.rand(5, requires_grad=True), torch.rand(5)
    args = (x, y)[:fn.__code__.co_argcount]
    line = f"{re.escape(__file__)}:{_line_of(fn)}"
    before = COUNTS.copy()
    with pytest.warns(UserWarning) as caught:
        out = torch.compile(fn, backend="cuvil")(*args)
    messages = [str(w.message) for w in caught if "cuvil backend" in str(w.message)]
    assert len(messages) == 1 and "\n" not in messages[0]
    assert re.search(rf"graph of {line} runs in eager PyTorch: AOTAutograd cannot trace "
                     rf"{re.escape(op)} \(called at {line}\)", messages[0]), messages[0]
    assert COUNTS["eager"] == before["eager"] + 1
    torch.testing.assert_close(out, fn(*args))
    with pytest.raises((RuntimeError, NotImplementedError)) as compiled_error:
        out.backward()
    with pytest.raises(type(compiled_error.value)) as eager_error:
        fn(*args).backward()
    assert str(compiled_error.value).splitlines()[0] == str(eager_error.value).splitlines()[0]


def test_without_a_gradient_the_same_op_compiles():
    """No gradient wanted: AOTAutograd traces no backward, and Cuvil compiles the graph (the
    op a torch fallback inside it)."""
    x = torch.rand(5)
    before = COUNTS.copy()
    with torch.no_grad():
        out = torch.compile(custom, backend="cuvil")(x)
    assert COUNTS["compiles"] == before["compiles"] + 1
    assert COUNTS["eager"] == before["eager"]
    torch.testing.assert_close(out, custom(x))
