"""Import makes a program functional: in-place ops become functional ones on every route
in (a module, an ExportedProgram); a write into an input is the graph's `mutations`; a
written buffer, a write into a view whose elements share memory (`expand`), and an
in-place op in a GraphModule that only a retrace imports, are one-line errors; an in-place
op that reaches the importer is an internal error."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import cuvil
from cuvil.frontend import export as export_stage
from cuvil.frontend import functional
from cuvil.ops.execute import run

X = (torch.randn(2, 8),)


class WritesInput(nn.Module):
    def forward(self, x):
        y = x.clone()
        y[:, :2].add_(1.0)
        x.mul_(3.0)
        return y + x


class CountsCalls(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(8))

    def forward(self, x):
        self.calls.add_(1)
        return x + self.calls


def assert_like_eager(graph, model, x):
    eager_x, graph_x = x.clone(), x.clone()
    expected = model(eager_x)
    got = run(graph, graph_x)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(graph_x, eager_x)  # the reference executor writes it too


@pytest.mark.parametrize("route", ["module", "exported program"])
def test_every_route_in_is_functional(route):
    model = WritesInput()
    source = model if route == "module" else torch.export.export(model, X)
    graph = cuvil.from_torch(source, X)
    assert not any(op.endswith("_") for op in graph.ops())
    assert graph.mutations.keys() == {"x"}
    assert "the call writes input x, as the model does" in graph.import_report.notes
    assert_like_eager(graph, model, torch.randn(2, 8))


def test_a_pure_program_is_imported_as_it_is(monkeypatch):
    called = []
    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions",
                        lambda *a, **k: called.append(a))
    graph = cuvil.from_torch(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), X)
    assert not called and not graph.mutations and "write " not in graph.to_text()


def test_a_written_buffer_is_refused_naming_it():
    with pytest.raises(cuvil.CuvilError, match=r"^cannot compile CountsCalls: its forward "
                                               r"writes buffer 'calls' in place"):
        cuvil.from_torch(CountsCalls(), X)


class ZeroesExpanded(nn.Module):
    """Eager zeroes `y`; functionalization computes `-y` (it sums the copies' changes)."""

    def forward(self, x):
        y = x - torch.sigmoid(x)
        y.unsqueeze(1).expand(-1, 2, -1).zero_()
        return y


class FillsSliceOfExpanded(nn.Module):
    def forward(self, x):
        y = torch.sigmoid(x).unsqueeze(1).expand(-1, 3, -1)
        y[:, :, :4].fill_(2.0)
        return y


@pytest.mark.parametrize("model", [ZeroesExpanded(), FillsSliceOfExpanded()],
                         ids=["zero_ of expand", "fill_ of a slice of expand"])
def test_a_write_into_a_view_sharing_memory_is_refused_at_its_line(model):
    line = r"expand\(-1, 2, -1\)\.zero_\(\)" if isinstance(model, ZeroesExpanded) \
        else r"y\[:, :, :4\]\.fill_\(2\.0\)"
    with pytest.raises(cuvil.CuvilError, match=r"^cannot compile \w+: aten\.\w+_\S* at "
                                               rf"\S+test_functional\.py:\d+ \(.*{line}\)"
                                               r" writes .* share memory"):
        cuvil.compile(model, X)


class AddsToOneCopy(nn.Module):
    """A write into one copy of an expand (no overlap) changes all copies, as in eager."""

    def forward(self, x):
        y = torch.sigmoid(x).unsqueeze(1).expand(-1, 3, -1)
        y[:, 1, :4].add_(1.0)
        return y


def test_a_write_into_one_copy_of_an_expand_matches_eager():
    x = torch.randn(2, 8)
    got = cuvil.compile(AddsToOneCopy(), (x,))(x)
    torch.testing.assert_close(got, AddsToOneCopy()(x))
    assert (got[:, 0, :4] > 1).all()  # every copy saw the write


def test_an_in_place_op_in_a_retraced_graph_module_is_refused(monkeypatch):
    def reject(*args):
        raise cuvil.CuvilError("torch.export failed")

    monkeypatch.setattr(export_stage, "export_module", reject)
    gm = torch.fx.symbolic_trace(WritesInput())
    with pytest.raises(cuvil.CuvilError, match=r"^cannot import WritesInput: aten\.add_\.Tensor "
                                               r"at .* writes a tensor in place"):
        cuvil.from_torch(gm, X)


def test_an_in_place_op_reaching_the_importer_is_an_internal_error(monkeypatch):
    monkeypatch.setattr(export_stage, "functional", lambda program, name: program)
    with pytest.raises(functional.InternalError, match=r"in-place op aten\.\w+_\.\w+ at "
                                                       r".*test_functional\.py:\d+"):
        cuvil.from_torch(WritesInput(), X)


class CopiesAndFills(nn.Module):
    def forward(self, x):
        y = x.clone()
        y[:, :2] = x[:, 2:4]  # a copy through a view: copy, then slice_scatter
        x.copy_(x * 2)
        y[0].fill_(0.5)
        return y


def test_copy_and_fill_made_functional_are_catalog_ops():
    graph = cuvil.from_torch(CopiesAndFills(), X, dynamic_shapes=False)
    fallbacks = [op for op, _ in graph.import_report.fallbacks]
    assert not any(op.startswith(("aten.copy", "aten.fill")) for op in fallbacks)
    x = torch.randn(2, 8)
    eager_x, graph_x = x.clone(), x.clone()
    torch.testing.assert_close(run(graph, graph_x), CopiesAndFills()(eager_x))
    torch.testing.assert_close(graph_x, eager_x)
