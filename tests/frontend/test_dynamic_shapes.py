"""The dynamic-shape policy: dim 0 is a symbolic `batch` by default (also from a batch-1
example), `dynamic_shapes=False` is static, a torch.export spec names its dims, and a
model that fixes its batch size imports static with a note; sizes outside those export
traced the model for are refused."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.export import Dim

import cuvil
from cuvil.ir import is_static, sym
from cuvil.ops.execute import run

BATCH = sym("batch")


class Flattener(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(4 * 5, 3)

    def forward(self, x, bias):
        return self.fc(x.reshape(x.shape[0], -1)) + bias, x.reshape(-1)


def inputs(batch=2):
    return torch.randn(batch, 4, 5), torch.randn(batch, 3)


def test_default_makes_dim_0_of_every_input_one_batch_symbol():
    graph = cuvil.from_torch(Flattener(), inputs())
    assert [graph[n].type.shape[0] for n in graph.inputs] == [BATCH, BATCH]
    assert graph.import_report.dynamic_dims == {"batch": "x dim 0"}
    flat = [n for n in graph if n.op == "reshape"]
    assert {n.attrs["shape"] for n in flat} == {(BATCH, 20), (20 * BATCH,)}
    assert "symbolic dims: batch (x dim 0)" in str(graph.import_report)


def test_a_batch_1_example_still_gives_a_graph_for_every_batch():
    model = Flattener()
    graph = cuvil.from_torch(model, inputs(1))
    assert graph[graph.inputs[0]].type.shape[0] == BATCH
    for batch in (1, 4):
        args = inputs(batch)
        for got, want in zip(run(graph, *args), model(*args), strict=True):
            torch.testing.assert_close(got, want)


def test_static_when_asked():
    graph = cuvil.from_torch(Flattener(), inputs(), dynamic_shapes=False)
    assert all(is_static(d) for n in graph for d in n.type.shape)
    assert not graph.import_report.dynamic
    assert "static shapes" in str(graph.import_report)


class Image(nn.Module):
    def forward(self, x):
        pooled = nn.functional.max_pool2d(x, 2)
        return pooled.flatten(1)


def test_a_torch_export_spec_names_the_dims():
    spec = ({0: Dim("N"), 2: Dim("H", min=4, max=64), 3: Dim("W", min=4, max=64)},)
    graph = cuvil.from_torch(Image(), (torch.randn(2, 3, 8, 10),), dynamic_shapes=spec)
    n, h, w = sym("N"), sym("H"), sym("W")
    assert graph[graph.inputs[0]].type.shape == (n, 3, h, w)
    out = graph[graph.outputs[0]].type.shape
    assert out[0] == n and (out[1] - 3 * (h // 2) * (w // 2)).simplify() == 0
    assert graph.import_report.dynamic_dims == {"N": "x dim 0", "H": "x dim 2",
                                                "W": "x dim 3"}
    x = torch.randn(3, 3, 7, 12)
    torch.testing.assert_close(run(graph, x), Image()(x))


def test_a_spec_keyed_by_argument_name():
    spec = {"x": {0: Dim("rows")}, "bias": {0: Dim("rows")}}
    graph = cuvil.from_torch(Flattener(), inputs(), dynamic_shapes=spec)
    assert [graph[n].type.shape[0] for n in graph.inputs] == [sym("rows")] * 2


class FixedBatch(nn.Module):
    def forward(self, x):
        return x.reshape(2, -1).sum(0)


def test_a_model_that_fixes_its_batch_imports_static_and_says_so():
    graph = cuvil.from_torch(FixedBatch(), (torch.randn(2, 3),))
    assert not graph.import_report.dynamic
    assert str(graph[graph.inputs[0]].type) == "f32[2,3]"
    assert any("could not stay dynamic" in n for n in graph.import_report.notes)


def test_rank_4_inputs_are_tagged_nchw():
    graph = cuvil.from_torch(Image(), (torch.randn(2, 3, 8, 8),))
    assert graph[graph.inputs[0]].type.layout == "NCHW"


class Pair(nn.Module):
    def forward(self, pair, scale):
        a, b = pair
        return (a @ b) * scale


def test_dims_of_nested_inputs_take_their_names():
    n, k, m = Dim("n"), Dim("k"), Dim("m")
    args = ((torch.randn(3, 4), torch.randn(4, 5)), torch.randn(3, 5))
    spec = (({0: n, 1: k}, {0: k, 1: m}), {0: n, 1: m})
    graph = cuvil.from_torch(Pair(), args, dynamic_shapes=spec)
    assert [graph[i].type.shape for i in graph.inputs] == [
        (sym("n"), sym("k")), (sym("k"), sym("m")), (sym("n"), sym("m"))]
    a, b, scale = torch.randn(2, 6), torch.randn(6, 7), torch.randn(2, 7)
    torch.testing.assert_close(run(graph, a, b, scale), Pair()((a, b), scale))


class Gate(nn.Module):
    """Goes one way up to length 5 and another beyond: torch.export narrows `seq` to the
    side the example took."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(50, 4)

    def forward(self, ids):
        y = self.emb(ids)
        return y * 2.0 if ids.shape[1] <= 5 else y - 1.0


def test_a_length_the_code_branches_on_is_refused_outside_what_export_traced():
    model, ids = Gate(), torch.randint(0, 50, (2, 4))
    compiled = cuvil.compile(model, (ids,), cache=False)
    graph = cuvil.from_torch(model, (ids,))
    assert graph.dim_ranges == {"seq": (None, 5)}
    assert "traced seq for sizes ..5 alone" in str(graph.import_report)
    for shape in ((3, 5), (2, 2)):
        x = torch.randint(0, 50, shape)
        torch.testing.assert_close(compiled(x), model(x))
    longer = torch.randint(0, 50, (2, 8))
    for call in (compiled, lambda x: run(graph, x)):  # the program and the reference
        with pytest.raises(cuvil.CuvilError, match=r"'ids': seq = 8 is outside \.\.5"):
            call(longer)
    beyond = cuvil.compile(model, (longer,), cache=False)  # traced the other way: 6..
    torch.testing.assert_close(beyond(longer), model(longer))
    with pytest.raises(cuvil.CuvilError, match=r"seq = 4 is outside 6\.\."):
        beyond(ids)
