"""Every way in: an nn.Module, an ExportedProgram, a `.pt2` file, a torch.fx.GraphModule
(exported, or retraced when torch.export rejects it); bad inputs are one clear error."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import cuvil
from cuvil.frontend import export as export_stage
from cuvil.ops.execute import run


class Block(nn.Module):
    """Conv with bias, batch norm, relu, pool, linear head: several converters at once."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


def example(batch=2):
    return (torch.randn(batch, 3, 8, 8),)


def check(graph, model, batches=(1, 3)):
    model.eval()
    for batch in batches:
        (x,) = example(batch)
        with torch.no_grad():
            torch.testing.assert_close(run(graph, x), model(x), rtol=1e-5, atol=1e-5)


def test_from_module():
    model = Block().eval()
    graph = cuvil.from_torch(model, example())
    assert graph.name == "Block" and graph.import_report.dynamic
    check(graph, model)


def test_a_module_in_training_mode_is_refused_not_switched_to_eval():
    model = Block().train()
    with pytest.raises(cuvil.CuvilError, match=r"submodule 'bn' \(BatchNorm2d\) of Block is "
                                               r"in training mode.*model\.eval\(\)"):
        cuvil.from_torch(model, example())
    assert model.training and model.bn.training


def test_training_flags_and_torch_settings_are_left_as_they_were():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).train()
    fastpath = torch.backends.mha.get_fastpath_enabled()
    cuvil.from_torch(model, (torch.randn(2, 8),))
    assert model.training and torch.is_grad_enabled()
    assert torch.backends.mha.get_fastpath_enabled() == fastpath


def test_from_exported_program():
    model = Block().eval()
    batch = torch.export.Dim("batch")
    program = torch.export.export(model, example(), dynamic_shapes=({0: batch},))
    graph = cuvil.from_torch(program)
    assert str(graph[graph.inputs[0]].type) == "f32[batch,3,8,8]"
    check(graph, model)


def test_from_pt2_file(tmp_path):
    model = Block().eval()
    program = torch.export.export(model, example(), dynamic_shapes=(
        {0: torch.export.Dim("batch")},))
    path = tmp_path / "block.pt2"
    torch.export.save(program, path)
    graph = cuvil.from_torch(str(path))
    assert graph.name == "block" and graph.import_report.dynamic
    check(graph, model)


def test_from_graph_module():
    model = Block().eval()
    gm = torch.fx.symbolic_trace(model)
    graph = cuvil.from_torch(gm, example())
    assert graph.import_report.dynamic
    check(graph, gm)


def test_graph_module_that_export_rejects_is_retraced(monkeypatch):
    def reject(*args):
        raise cuvil.CuvilError("torch.export failed")

    monkeypatch.setattr(export_stage, "export_module", reject)
    model = Block().eval()
    gm = torch.fx.symbolic_trace(model)
    graph = cuvil.from_torch(gm, example())
    assert not graph.import_report.dynamic
    assert "retraced" in str(graph.import_report)
    assert graph.constants["conv.weight"] is gm.conv.weight
    check(graph, gm, batches=(2,))


class Structured(nn.Module):
    def forward(self, x, y):
        return {"sum": x + y, "parts": (x * 2, [torch.relu(y)])}


def test_output_structure_is_kept():
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    graph = cuvil.from_torch(Structured(), (x, y))
    out = run(graph, x, y)
    assert set(out) == {"sum", "parts"} and isinstance(out["parts"][1], list)
    torch.testing.assert_close(out["parts"][1][0], torch.relu(y))


class DataDependent(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x + 1
        return x - 1


@pytest.mark.parametrize("model, args, message", [
    ("missing.pt2", (), "missing.pt2: no such file"),
    (42, (), "cannot import an object of type int: expected a torch.nn.Module"),
    (DataDependent(), (torch.randn(2, 3),), "torch.export failed on DataDependent"),
])
def test_bad_models_are_one_line_errors(model, args, message, tmp_path):
    with pytest.raises(cuvil.CuvilError, match=message) as caught:
        cuvil.from_torch(model, args)
    assert "\n" not in str(caught.value)


def test_a_file_that_is_not_pt2_is_a_clear_error(tmp_path):
    path = tmp_path / "junk.pt2"
    path.write_text("not a zip")
    with pytest.raises(cuvil.CuvilError, match="junk.pt2: not a torch.export .pt2 file"):
        cuvil.from_torch(str(path))
