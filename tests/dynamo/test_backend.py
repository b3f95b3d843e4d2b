"""tests/dynamo/test_backend.py: `torch.compile(model, backend="cuvil")` for inference:
the registered name, graph breaks, one compile serving several batch sizes, and eager
fallback with a warning for a graph Cuvil refuses."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from cuvil.dynamo import COUNTS, compile_graph


class Branchy(nn.Module):
    """A data-dependent Python branch: Dynamo breaks the graph at the `if`."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 6)
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        if x.sum() > 0:
            return self.head(self.fc(x).relu())
        return self.head(self.fc(x).tanh()) - 1


def test_the_entry_point_lists_the_backend_without_importing_cuvil():
    code = ("import sys, torch._dynamo as d; ok = 'cuvil' in d.list_backends(); "
            "fn = d.lookup_backend('cuvil'); print(ok, fn.__module__, 'cuvil' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["True", "cuvil.dynamo", "True"]


def test_a_graph_break_matches_eager_on_both_sides_and_one_compile_serves_three_batches():
    torch.manual_seed(0)
    model = Branchy().eval()
    compiled = torch.compile(model, backend="cuvil", dynamic=True)
    before = COUNTS.copy()
    with torch.no_grad():
        for batch in (3, 5, 9):
            x = torch.rand(batch, 8) + 0.1
            for sign in (1, -1):  # positive sum, then negative: both branches
                torch.testing.assert_close(compiled(sign * x), model(sign * x))
    # three graphs (the test, each branch), each compiled once for every batch size
    assert COUNTS["compiles"] - before["compiles"] == 3
    assert COUNTS["eager"] == before["eager"]


def test_a_graph_cuvil_refuses_runs_in_eager_with_a_warning_naming_its_source_line():
    model = Branchy().eval()
    compiled = torch.compile(model, backend="cuvil", options={"target": "no-such-target"})
    x = torch.rand(2, 8)
    line = r"inference graph of .*test_backend\.py:\d+ runs in eager PyTorch: no backend for"
    with pytest.warns(UserWarning, match=line), torch.no_grad():
        out = compiled(x)
    torch.testing.assert_close(out, model(x))


def test_a_cnn_at_dynamic_sizes_matches_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(8 * 4 * 4, 10)).eval()
    compiled = torch.compile(model, backend="cuvil", dynamic=True)
    before = COUNTS.copy()
    with torch.no_grad():
        for batch in (2, 5, 7):
            x = torch.randn(batch, 3, 8, 8)
            torch.testing.assert_close(compiled(x), model(x))
    assert COUNTS["compiles"] - before["compiles"] == 1


def test_an_input_the_forward_saves_is_returned_as_it_is():
    def forward(x, w):
        return (torch.relu(x @ w), w, x)

    gm = torch.fx.symbolic_trace(forward)
    x, w = torch.randn(4, 5), torch.randn(5, 3)
    out = compile_graph(gm, [x, w])([x, w])
    assert out[1] is w and out[2] is x
    torch.testing.assert_close(out[0], torch.relu(x @ w))
