"""The compile cache: what the key depends on, and a round trip that keeps weights by
reference and gives the same optimized graph."""

from __future__ import annotations

import torch

import cuvil
from cuvil import cache, zoo

OPTIONS = {"rules": None, "target": "cpu", "dynamic_shapes": None, "limits": None,
           "disable": ()}


def test_key_depends_on_weights_inputs_and_options():
    model, inputs = zoo.get("mlp", batch=2)
    key = cache.model_key(model, inputs, OPTIONS)
    assert key == cache.model_key(model, inputs, dict(OPTIONS))
    assert key != cache.model_key(model, inputs, {**OPTIONS, "disable": ("fusion",)})
    assert key != cache.model_key(model, (torch.randn(2, 700),), OPTIONS)
    assert key != cache.model_key(model, inputs, {**OPTIONS, "rules": "rule r: relu(x) => x\n"})
    with torch.no_grad():
        next(model.parameters())[0, 0] += 1.0
    assert key != cache.model_key(model, inputs, OPTIONS)
    assert cache.model_key("model.pt2", inputs, OPTIONS) is None  # only nn.Modules


def test_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    model, inputs = zoo.get("cnn", batch=2)
    key = cache.model_key(model, inputs, OPTIONS)
    assert cache.load(key, model) is None
    graph = cuvil.optimize(model, inputs)
    cache.store(key, graph, model)
    again = cache.load(key, model)
    assert again.to_text() == graph.to_text()
    own = model.state_dict()
    shared = [n.attrs["ref"] for n in again if n.op == "const" and n.attrs["ref"] in own]
    assert shared and all(again.constants[r].data_ptr() == own[r].data_ptr() for r in shared)
    assert "compile cache" in again.report.notes[-1]
    torch.testing.assert_close(cuvil.run(again, *inputs), cuvil.run(graph, *inputs))
