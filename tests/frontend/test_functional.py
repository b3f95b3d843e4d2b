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


class ScalesTransposed(nn.Module):
    """`contiguous` copies a transposed 2 x 8 tensor but returns a 1 x 8 one itself: at
    batch 1 eager's write reaches the caller's x."""

    def forward(self, x):
        y = x.transpose(0, 1).contiguous()
        y *= 2.0
        return y + 1.0


class FlattensAfterWrite(nn.Module):
    def forward(self, x):
        y = torch.relu_(x * 2.0)
        return y.flatten(1).sum(1)


def _call_both(model, compiled, x):
    """(compiled result, eager result, caller's x after each call)."""
    mine, theirs = x.clone(), x.clone()
    return compiled(mine), model(theirs), mine, theirs


def test_a_write_through_contiguous_holds_from_batch_2_and_a_batch_1_compile_is_static():
    model = ScalesTransposed()
    compiled = cuvil.compile(model, (torch.randn(4, 8),))
    got, want, mine, theirs = _call_both(model, compiled, torch.randn(3, 8))
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(mine, theirs)
    with pytest.raises(cuvil.CuvilError, match="batch = 1 is outside 2.., .*shares memory"):
        compiled(torch.randn(1, 8))
    one = cuvil.compile(model, (torch.randn(1, 8),))
    got, want, mine, theirs = _call_both(model, one, torch.randn(1, 8))
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(mine, theirs)  # eager's write into x, done by the call too
    graph = cuvil.from_torch(model, (torch.randn(1, 8),))
    assert not graph.import_report.dynamic
    assert any("imported static: aten.mul_.Tensor" in n for n in graph.import_report.notes)


def test_a_flatten_before_no_write_keeps_batch_1():
    model = FlattensAfterWrite()
    compiled = cuvil.compile(model, (torch.randn(4, 2, 3),))
    got, want, mine, theirs = _call_both(model, compiled, torch.randn(1, 2, 3))
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(mine, theirs)


def test_an_in_place_op_in_a_retraced_graph_module_is_refused(monkeypatch):
    def reject(*args):
        raise cuvil.CuvilError("torch.export failed")

    monkeypatch.setattr(export_stage, "export_module", reject)
    gm = torch.fx.symbolic_trace(WritesInput())
    with pytest.raises(cuvil.CuvilError, match=r"^cannot import WritesInput: aten\.add_\.Tensor "
                                               r"at .* writes a tensor in place"):
        cuvil.from_torch(gm, X)


def test_an_in_place_op_reaching_the_importer_is_an_internal_error(monkeypatch):
    monkeypatch.setattr(functional, "functional", lambda program, name: program)
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
