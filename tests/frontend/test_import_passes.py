"""The import is three passes, each entered once, in order: export (the captured program,
in-place ops kept), functionalize, convert. A pass past export that fails under the
symbolic dims the default policy chose runs the three again, static, and the report says
which failed; with the user's own dims it is the user's one-line error. Each import
computes what torch eager does, writes into its input included."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import cuvil
from cuvil.frontend import IMPORT, Importing, functional, import_passes
from cuvil.trace import Tracer


class WritesInput(nn.Module):
    def forward(self, x):
        x.mul_(2)
        return torch.relu(x) + 1


def eager(model, x):
    """(the model's result, its input after the call)."""
    x = x.clone()
    with torch.no_grad():
        return model(x), x


def test_the_passes_run_once_in_order_and_hand_on_each_value():
    tracer = Tracer()
    done = import_passes(Importing(WritesInput(), (torch.randn(4, 3),)), tracer)
    assert [p.name for p in IMPORT] == list(tracer.passes) == [
        "export", "functionalize", "convert"]
    assert functional.first_mutation(done.exported.program.graph) is not None  # kept
    assert functional.first_mutation(done.traced.graph) is None
    assert done.graph.import_report.dynamic and list(done.graph.mutations) == ["x"]


def symbolic_only_failure(monkeypatch):
    """Functionalization refuses a program with a symbolic dim, as torch may."""
    functionalize = functional.functional

    def static_only(program, name):
        for node in program.graph.nodes:
            value = node.meta.get("val")
            if isinstance(value, torch.Tensor) and any(
                    isinstance(d, torch.SymInt) for d in value.shape):
                raise cuvil.CuvilError(f"cannot functionalize {name}: a symbolic dim")
        return functionalize(program, name)

    monkeypatch.setattr(functional, "functional", static_only)


def test_a_functionalize_failure_under_symbolic_dims_is_retried_static(monkeypatch):
    symbolic_only_failure(monkeypatch)
    model, x = WritesInput(), torch.randn(4, 3)
    graph = cuvil.from_torch(model, (x,))
    assert not graph.import_report.dynamic
    assert any(n.startswith("the batch dim could not stay dynamic, imported static: cannot "
                            "functionalize WritesInput") for n in graph.import_report.notes)
    want, written = eager(model, x)
    mine = x.clone()
    compiled = cuvil.compile(model, (x,), cache=False)  # the same import, retried
    torch.testing.assert_close(compiled(mine), want)
    torch.testing.assert_close(mine, written)


def test_a_functionalize_failure_under_the_users_dims_is_their_error(monkeypatch):
    symbolic_only_failure(monkeypatch)
    spec = ({0: torch.export.Dim("rows")},)
    with pytest.raises(cuvil.CuvilError, match="^cannot functionalize WritesInput: a "
                                               "symbolic dim$"):
        cuvil.from_torch(WritesInput(), (torch.randn(4, 3),), dynamic_shapes=spec)
