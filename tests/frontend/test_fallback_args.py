"""Ops that run through torch take any argument aten takes (dtypes, devices, layouts,
memory formats, symbolic sizes) and keep them through the text form and pickles; an
export failure is one line saying what to try next; an import that fails under symbolic
dims is retried static, and the report says so."""

from __future__ import annotations

import pickle

import pytest
import torch
from torch import nn
from torch.export import Dim

import cuvil
from cuvil.frontend.aten import ATEN
from cuvil.ir import Graph
from cuvil.ir.torch_template import decode_arg, encode_arg
from cuvil.ops.execute import run


class Positions(nn.Module):
    """Position code as transformers writes it: dtype, device and symbolic sizes."""

    def forward(self, ids):
        pos = torch.arange(ids.shape[0], ids.shape[0] + ids.shape[1], dtype=torch.float32,
                           device=ids.device)  # a symbolic start: no catalog form
        running = torch.cumprod(ids, 1, dtype=torch.float64).to(torch.float32)
        mask = torch.ones(ids.shape[0], ids.shape[1], dtype=torch.bool, device=ids.device)
        return (running + pos) * (mask & (ids > 1))


def test_fallbacks_with_torch_arguments_match_eager_at_other_sizes():
    ids = torch.randint(0, 5, (2, 6))
    graph = cuvil.from_torch(Positions(), (ids,))
    report = graph.import_report
    assert set(report.dynamic_dims) == {"batch", "seq"}
    assert {op for op, _ in report.fallbacks} == {"aten.arange.start",
                                                  "aten.cumprod.default"}
    for shape in ((2, 6), (3, 9)):
        ids = torch.randint(0, 5, shape)
        want = Positions()(ids)
        for g in (graph, Graph.from_text(str(graph), graph.constants),
                  pickle.loads(pickle.dumps(graph))):
            torch.testing.assert_close(run(g, ids), want)


def test_the_compiled_fallbacks_match_eager():
    fast = cuvil.compile(Positions(), (torch.randint(0, 5, (2, 6)),), cache=False)
    ids = torch.randint(0, 5, (4, 3))
    torch.testing.assert_close(fast(ids), Positions()(ids))


@pytest.mark.parametrize("value", [torch.float16, torch.bool, torch.strided,
                                   torch.channels_last, torch.contiguous_format,
                                   torch.device("cpu"), "$0", "%x"])
def test_torch_arguments_travel_as_tagged_strings(value):
    text = encode_arg(value)
    assert isinstance(text, str) and text.startswith("%")
    assert decode_arg(text) == value


def test_plain_arguments_are_not_tagged():
    assert [encode_arg(v) for v in (1, 2.5, None, "floor")] == [None] * 4


class Raises(nn.Module):
    def forward(self, x):
        raise ValueError("this model cannot be traced")


class ReturnsObject(nn.Module):
    def forward(self, x):
        return {"x": x, "obj": object()}


@pytest.mark.parametrize("model, dynamic, hint", [
    (Raises(), ({0: Dim("n")},), "try dynamic_shapes=False"),
    (ReturnsObject(), False, "try use_cache=False"),
])
def test_an_export_failure_is_one_line_saying_what_to_try(model, dynamic, hint):
    with pytest.raises(cuvil.CuvilError) as info:
        cuvil.from_torch(model, (torch.randn(2, 3),), dynamic_shapes=dynamic)
    message = str(info.value)
    assert message.startswith(f"torch.export failed on {type(model).__name__}: ")
    assert hint in message and "\n" not in message


class Positional(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(16, 3))

    def forward(self, x):
        return x + self.table[: x.shape[0]]


def test_a_spec_torch_can_fix_is_refined_and_the_report_says_so():
    spec = ({0: Dim("n")},)  # no max: torch suggests n <= 16
    model = Positional()
    graph = cuvil.from_torch(model, (torch.randn(4, 3),), dynamic_shapes=spec)
    assert graph.import_report.dynamic_dims == {"n": "x dim 0"}
    assert any("suggested fixes" in n for n in graph.import_report.notes)
    x = torch.randn(9, 3)
    with torch.no_grad():
        torch.testing.assert_close(run(graph, x), model(x))


def test_an_import_failing_under_symbolic_dims_is_retried_static(monkeypatch):
    relu = ATEN["relu"]

    def static_only(ix, a):
        if not all(isinstance(d, int) for d in ix.type(a["input"]).shape):
            raise cuvil.CuvilError("relu: symbolic dims are not supported here")
        return relu(ix, a)

    monkeypatch.setitem(ATEN, "relu", static_only)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    x = torch.randn(2, 3)
    graph = cuvil.from_torch(model, (x,))
    assert not graph.import_report.dynamic
    assert any(n.startswith("import with symbolic dims failed, imported static: relu")
               for n in graph.import_report.notes)
    torch.testing.assert_close(run(graph, x), model(x))
