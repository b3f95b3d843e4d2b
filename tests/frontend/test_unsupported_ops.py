"""Ops without a catalog entry: they run through torch as opaque `torch_op` nodes, listed
with their source lines in the import report; `strict=True` makes them one error."""

from __future__ import annotations

import inspect
import os

import pytest
import torch

import cuvil
from cuvil.ops.execute import run


class CumprodSort(torch.nn.Module):
    def forward(self, x):
        y = torch.cumprod(x, dim=1)
        z = torch.sort(y, dim=-1).values
        return torch.relu(z) * 2.0


def line_of(code: str) -> str:
    """`file:line` of the line of CumprodSort that contains `code`."""
    lines, start = inspect.getsourcelines(CumprodSort)
    offset = next(i for i, line in enumerate(lines) if code in line)
    path = os.path.abspath(__file__)
    cwd = os.getcwd() + os.sep
    return f"{path[len(cwd):] if path.startswith(cwd) else path}:{start + offset}"


def test_cumprod_and_sort_become_two_torch_ops_and_match_eager():
    model = CumprodSort()
    graph = cuvil.from_torch(model, (torch.randn(4, 6),))
    fallbacks = [n for n in graph if n.op == "torch_op"]
    assert [n.attrs["target"] for n in fallbacks] == ["aten.cumprod.default",
                                                      "aten.sort.default"]
    assert fallbacks[1].attrs["index"] == 0
    for batch in (1, 5):
        x = torch.randn(batch, 6)
        torch.testing.assert_close(run(graph, x), model(x), rtol=0, atol=0)


def test_report_lists_each_fallback_with_its_source_line():
    report = cuvil.from_torch(CumprodSort(), (torch.randn(4, 6),)).import_report
    assert [(op, src.where) for op, src in report.fallbacks] == [
        ("aten.cumprod.default", line_of("cumprod")), ("aten.sort.default", line_of("sort"))]
    text = str(report)
    assert "2 op(s) without a catalog entry" in text
    assert f"aten.cumprod.default at {line_of('cumprod')} (y = torch.cumprod(x, dim=1))" in text


def test_strict_import_is_one_error_naming_every_unsupported_op():
    with pytest.raises(cuvil.UnsupportedOpsError) as caught:
        cuvil.from_torch(CumprodSort(), (torch.randn(4, 6),), strict=True)
    error = caught.value
    assert isinstance(error, cuvil.CuvilError)
    message = str(error)
    assert message.startswith("2 unsupported op(s): ") and "\n" not in message
    assert f"aten.cumprod.default at {line_of('cumprod')}" in message
    assert f"aten.sort.default at {line_of('sort')}" in message
    assert [op for op, _ in error.unsupported] == ["aten.cumprod.default", "aten.sort.default"]


class SortBoth(torch.nn.Module):
    def forward(self, x):
        values, indices = torch.sort(x, dim=0)
        return values, indices


def test_each_used_result_of_a_tuple_op_is_its_own_torch_op():
    model = SortBoth()
    graph = cuvil.from_torch(model, (torch.randn(4, 3),))
    ops = [n for n in graph if n.op == "torch_op"]
    assert [n.attrs["index"] for n in ops] == [0, 1]
    assert str(graph[ops[1].name].type) == "i64[batch,3]"
    x = torch.randn(6, 3)
    got, want = run(graph, x), model(x)
    assert isinstance(got, tuple) and all(torch.equal(a, b) for a, b in zip(got, want,
                                                                           strict=True))


class Positions(torch.nn.Module):
    def forward(self, x):
        return x + torch.arange(x.shape[1], dtype=torch.float32)


def test_an_op_on_constants_only_is_computed_at_import():
    graph = cuvil.from_torch(Positions(), (torch.randn(2, 5),))
    assert "torch_op" not in graph.ops() and not graph.import_report.fallbacks
    assert any("computed at import: aten.arange" in n for n in graph.import_report.notes)
    x = torch.randn(3, 5)
    torch.testing.assert_close(run(graph, x), Positions()(x))
