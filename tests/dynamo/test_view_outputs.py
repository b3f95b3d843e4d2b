"""A graph's outputs that are views (q, k and v split from one
projection, at offsets into it; a transposed weight) or laid out in a permuted order come
back from Cuvil in the layout the graph gives them, the views as views of their root and
never as writes to a caller's tensor, and the backward graph that reads them computes
eager's gradients."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import fx, nn

from cuvil.dynamo import COUNTS, compile_graph
from cuvil.dynamo.compiler import Program
from cuvil.dynamo.layouts import dense_order, logical


class SplitProjection(nn.Module):
    """One q/k/v projection split in three, as multi-head attention splits it."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return (q.sigmoid() * k) @ v.transpose(-1, -2)


def graphs_of(model: nn.Module, x: torch.Tensor) -> dict:
    """Cuvil's forward and backward programs of `model` on `x`, each checked, at each
    call, against its graph run by torch: every output's value, shape, strides and
    offset."""
    from torch._dynamo.backends.common import aot_autograd

    seen: dict = {}

    def checked(kind: str):
        def compiler(gm: fx.GraphModule, example_inputs):
            program = compile_graph(gm, example_inputs, kind=kind)

            def call(args):
                expected = gm(*[a.clone() if isinstance(a, torch.Tensor) else a
                                for a in args])
                got = program(list(args))
                seen[kind] = (got, expected)
                return got

            call._boxed_call = True
            return call
        return compiler

    backend = aot_autograd(fw_compiler=checked("forward"), bw_compiler=checked("backward"))
    torch.compile(model, backend=backend)(x).square().sum().backward()
    return seen


def test_view_outputs_keep_the_graphs_layout():
    torch.manual_seed(0)
    before = COUNTS.copy()
    seen = graphs_of(SplitProjection(), torch.randn(5, 7, 16))
    assert COUNTS["compiles"] - before["compiles"] == 2
    offsets = []
    for got, expected in seen.values():
        for a, b in zip(got, expected, strict=True):
            if isinstance(b, torch.Tensor):
                torch.testing.assert_close(a, b)
                assert (a.shape, a.stride(), a.storage_offset()) == \
                    (b.shape, b.stride(), b.storage_offset())
                offsets.append(b.storage_offset())
    assert any(offsets), "the forward saves a view at an offset (k, v)"


def test_gradients_through_split_views_match_eager():
    torch.manual_seed(0)
    model, x = SplitProjection(), torch.randn(5, 7, 16)
    reference = copy.deepcopy(model)
    before = COUNTS.copy()
    torch.compile(model, backend="cuvil")(x).square().sum().backward()
    reference(x).square().sum().backward()
    assert COUNTS["compiles"] - before["compiles"] == 2
    assert COUNTS["eager"] == before["eager"]
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)


def test_a_forward_call_writes_no_tensor_of_the_callers():
    """The encoder layer's forward returns views of its q/k/v projection and of its
    weights (transposed) for the backward: its parameters and input keep their bytes."""
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).train()
    x = torch.randn(2, 6, 32)
    before = COUNTS.copy()
    compiled = torch.compile(model, backend="cuvil")
    compiled(x)  # compiles
    params = {name: p.detach().clone() for name, p in model.named_parameters()}
    given = x.clone()
    out = compiled(x)
    assert COUNTS["compiles"] - before["compiles"] >= 1
    assert COUNTS["eager"] == before["eager"]
    torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
    assert torch.equal(x, given)
    for name, p in model.named_parameters():
        assert torch.equal(p.detach(), params[name]), name


@pytest.mark.parametrize(("tensor", "order"), [
    (torch.zeros(3, 5).t(), (1, 0)),
    (torch.zeros(2, 3, 4).permute(2, 0, 1), (1, 2, 0)),
    (torch.zeros(2, 1, 4).transpose(0, 2), (1, 2, 0)),  # a size-1 dim: either place
    (torch.zeros(3, 5), None),  # row-major already
    (torch.zeros(4, 6)[:, :3].t(), None),  # not dense
    (torch.zeros(7)[1:].view(2, 3).t(), (1, 0)),  # at an offset
    (torch.zeros(2, 2, 2).transpose(0, 2)[:, :1], None),  # a gap
    (torch.zeros(1, 3).expand(4, 3).t(), None),  # overlapping
])
def test_dense_order_is_the_order_of_a_tensors_memory(tensor, order):
    assert dense_order(tensor) == order
    if order is not None:
        memory = tensor.permute(order)
        assert memory.is_contiguous()
        back = logical(memory, order)
        assert (back.shape, back.stride()) == (tensor.shape, tensor.stride())


def test_a_transposed_input_is_read_as_its_memory():
    """A graph input laid out transposed (a weight the forward saves as `t(w)`) reaches
    Cuvil as its own memory, row-major, and the graph computes torch's result."""
    from torch.fx.experimental.proxy_tensor import make_fx

    torch.manual_seed(0)
    x, w, y = torch.randn(6, 5), torch.randn(5, 4), torch.randn(4, 3, 2)
    gm = make_fx(lambda x, wt, yp: (torch.mm(x, wt.t()) + 1.0, yp * 2.0),
                 tracing_mode="fake")(x, w.t(), y.permute(2, 0, 1))
    program = Program(gm, [x, w.t(), y.permute(2, 0, 1)], {}, "test graph")
    assert program.orders == [None, (1, 0), (1, 2, 0)]
    physical = program._physical([x, w.t(), y.permute(2, 0, 1)])
    assert physical[1].is_contiguous() and physical[1].data_ptr() == w.data_ptr()
    assert physical[2].is_contiguous() and physical[2].data_ptr() == y.data_ptr()
    got = program(x, w.t(), y.permute(2, 0, 1))
    torch.testing.assert_close(got[0], x @ w + 1.0)
    torch.testing.assert_close(got[1], y.permute(2, 0, 1) * 2.0)


def test_a_row_major_view_output_is_a_view_of_its_root_not_a_copy():
    """An output that is a row-major view of another value (a layer norm's result and its
    [rows, d] view, both saved for the backward; a view of a value the graph does not
    return) comes back as that view of its root, as torch's graph returns it."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from cuvil.dynamo.layouts import ViewOf

    x = torch.randn(4, 6, 8)
    gm = make_fx(lambda x: (torch.sin(x) * 2.0, (torch.sin(x) * 2.0).view(24, 8),
                            (x * 3.0).view(-1)), tracing_mode="fake")(x)
    program = Program(gm, [x], {}, "test graph")
    assert all(isinstance(r, ViewOf) for r in program.rest[1:3])
    y, rows, flat = program(x)
    torch.testing.assert_close(y, torch.sin(x) * 2.0)
    torch.testing.assert_close(rows, (torch.sin(x) * 2.0).view(24, 8))
    torch.testing.assert_close(flat, (x * 3.0).view(-1))
    assert rows.shape == (24, 8) and rows.is_contiguous() and flat.is_contiguous()
    assert rows._base is not None and flat._base is not None  # views, not copies


def test_whole_views_and_inputs_take_the_plain_call():
    """A static graph whose outputs are computed tensors, inputs, or a row-major view of
    all of a computed value (a bias gradient `view(sum(g, [0], True), [n])`) is called
    without the general rebuild: each such view is `view` of its root, each input passed
    back as it is."""
    from torch.fx.experimental.proxy_tensor import make_fx

    x, w = torch.randn(6, 4), torch.randn(4, 3)
    gm = make_fx(lambda x, w: (x @ w, w, (x * 2.0).sum(0, keepdim=True).view(4),
                               (x + 1.0).view(2, 3, 4)), tracing_mode="fake")(x, w)
    program = Program(gm, [x, w], {}, "test graph")
    assert program.plain and set(program.reshaped) == {2, 3}
    product, passed, total, cube = program(x, w)
    assert passed is w
    torch.testing.assert_close(product, x @ w)
    torch.testing.assert_close(total, (x * 2.0).sum(0))
    torch.testing.assert_close(cube, (x + 1.0).view(2, 3, 4))
    assert total.shape == (4,) and cube.is_contiguous()
