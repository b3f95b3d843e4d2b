"""The import cache: a warm compile in a new process skips torch.export and never imports
torch._dynamo, and computes what torch eager does; every change to what a model computes
misses and imports the changed model; what the key cannot cover, or what export and the
trace disagree on, is imported as usual and never served from the cache."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import cuvil
from cuvil.cache import import_entry, tensor_entry
from cuvil.ops.execute import run
from cuvil.options import CompileOptions
from cuvil.passes import run as run_passes
from cuvil.pipeline import PASSES
from cuvil.pipeline.values import Compilation, Request, fingerprinted
from cuvil.trace import Tracer


def import_model(model, inputs, dynamic_shapes, tracer):
    """The compile's import stage alone, through the import cache (`ImportCache`)."""
    options = CompileOptions.of(dynamic_shapes=dynamic_shapes)
    request = fingerprinted(Request(model, inputs, options, tracer))
    return run_passes(PASSES[:1], Compilation(request), tracer).graph


class Block(nn.Module):
    """A linear layer, an activation, a normalization and a Python attribute."""

    def __init__(self, k: float = 2.0, slope: float = 0.1, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.lin = nn.Linear(8, 8)
        self.act = nn.LeakyReLU(slope)
        self.drop = nn.Dropout(0.5)
        self.k = k
        self.eval()

    def forward(self, x):
        return self.drop(self.act(self.lin(x))) * self.k


class Conv(nn.Module):
    def __init__(self, padding: int):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=padding)
        self.bn = nn.BatchNorm2d(4)
        self.eval()

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def imported(model, *inputs):
    """(the imported graph's result, the import cache's status) for `model`."""
    tracer = Tracer()
    graph = import_model(model, inputs, None, tracer)
    with torch.no_grad():
        expected = model(*inputs)
    torch.testing.assert_close(run(graph, *inputs), expected)
    assert ("import (cached)" in tracer.totals) == graph.import_report.cache.startswith("hit")
    return graph.import_report.cache.split(" ")[0].rstrip(":,")


X = torch.randn(4, 8)
IMAGES = torch.randn(2, 3, 8, 8)


def test_the_same_program_hits_and_its_constants_are_the_models_own(fresh_cache):
    assert imported(Block(), X) == "miss"
    model = Block()
    graph = import_model(model, (X,), None, Tracer())
    assert graph.import_report.cache.startswith("hit")
    assert graph.constants["lin.bias"] is model.lin.bias
    torch.testing.assert_close(graph.constants["lin.weight.T"], model.lin.weight.T)
    (entry,) = fresh_cache.glob("imports/*.cvi")
    header, stored = tensor_entry.unpack(import_entry.FORMAT, entry.read_bytes())
    assert stored == {}  # no weight is stored: all are found in the model
    assert all(binding[0] != "bytes" for binding in header["constants"].values())


@pytest.mark.parametrize("name", ["cnn", "gpt2", "transformer", "vit"])
def test_a_hit_is_the_graph_a_fresh_import_gives(fresh_cache, name):
    from cuvil import zoo
    from cuvil.frontend import from_torch

    model, inputs = zoo.get(name, batch=2)
    import_model(model, inputs, None, Tracer())
    hit = import_model(model, inputs, None, Tracer())
    fresh = from_torch(model, inputs)
    assert hit.import_report.cache.startswith("hit")
    assert list(hit) == list(fresh) and hit.to_text() == fresh.to_text()  # order, sources
    assert (hit.name, hit.inputs, hit._counter) == (fresh.name, fresh.inputs, fresh._counter)
    assert hit.import_report.notes == fresh.import_report.notes
    for ref, t in fresh.constants.items():
        u = hit.constants[ref]
        assert (u.dtype, u.shape, u.stride(), u.requires_grad) == \
            (t.dtype, t.shape, t.stride(), t.requires_grad)
        assert torch.equal(u, t)


def _train_mode_linear() -> Block:
    """Block with every module in training mode but the dropout (whose forward depends on
    it): it computes what the eval-mode Block does, under another key."""
    model = Block().train()
    model.drop.eval()
    return model


@pytest.mark.parametrize("changed", [
    lambda: Block(seed=1),  # other weights
    lambda: Block(k=3.0),  # a Python attribute read in forward
    lambda: Block(slope=0.2),  # a leaf module's constructor argument
    _train_mode_linear,  # training flags (of modules whose forward does not read them)
])
def test_a_change_misses_and_imports_the_changed_model(fresh_cache, changed):
    assert imported(Block(), X) == "miss"
    assert imported(changed(), X) == "miss"
    assert imported(changed(), X) == "hit"
    assert imported(Block(), X) == "hit"


def test_a_model_in_training_mode_is_refused_with_a_warm_cache(fresh_cache):
    assert imported(Block(), X) == "miss"
    assert imported(Block(), X) == "hit"
    with pytest.raises(cuvil.CuvilError, match=r"submodule 'drop' \(Dropout\) of Block is in "
                                         r"training mode.*call model\.eval\(\)"):
        import_model(Block().train(), (X,), None, Tracer())


def test_a_weight_changed_in_place_misses(fresh_cache):
    model = Block()
    assert imported(model, X) == "miss"
    with torch.no_grad():
        model.lin.weight.mul_(-1)
    assert imported(model, X) == "miss"


def test_leaf_configuration_and_inputs_are_in_the_key(fresh_cache):
    assert imported(Conv(0), IMAGES) == "miss"
    assert imported(Conv(1), IMAGES) == "miss"
    assert imported(Conv(1), IMAGES) == "hit"
    assert imported(Constant(), X) == "miss"
    assert imported(Constant(), X.double()) == "miss"
    assert imported(Constant(), torch.randn(6, 8)) == "miss"
    assert imported(Constant(), torch.randn(6, 8)) == "hit"


class Untraceable(nn.Module):
    """torch.fx cannot branch on a shape; torch.export can."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(x) if x.shape[-1] > 4 else x


class Asks(nn.Module):
    """Tells a proxy from a tensor: torch.fx and torch.export go different ways."""

    def __init__(self, k: float):
        super().__init__()
        self.k = k

    def forward(self, x):
        if isinstance(x, torch.Tensor):
            return x * self.k
        return x * 2.0


class Default(nn.Module):
    """A value only export sees: torch.fx makes the missing attribute a graph value."""

    def __init__(self, k: float):
        super().__init__()
        self.k = k

    def forward(self, x):
        return x * getattr(x, "scale", self.k)


def hooked():
    model = Block()
    model.act.register_forward_hook(lambda m, i, o: o + 1)
    return model


@pytest.mark.parametrize(("build", "status"), [
    (Untraceable, "miss"),  # miss, program cache only: keyed by a fake-tensor trace
    (hooked, "not"),  # not used: a hook
    (lambda: Asks(2.0), "miss"),  # miss, not stored: another way under export
    (lambda: Default(2.0), "miss"),  # miss, not stored: the traced graph does not import
])
def test_what_the_cache_cannot_vouch_for_is_imported_every_time(fresh_cache, build, status):
    for _ in range(2):
        assert imported(build(), X) == status
    assert not list(fresh_cache.glob("imports/*.cvi"))


def test_a_disagreement_is_never_served_for_another_value(fresh_cache):
    for k in (2.0, 3.0):  # would share an entry if the trace's key were trusted alone
        assert imported(Asks(k), X) == "miss"
        assert imported(Default(k), X) == "miss"


class Constant(nn.Module):
    def forward(self, x):
        return x + torch.arange(8.0)


def test_a_constant_the_model_makes_is_stored(fresh_cache):
    assert imported(Constant(), X) == "miss"
    assert imported(Constant(), X) == "hit"
    assert not hasattr(Constant(), "_tensor_constant0")


def test_a_damaged_entry_is_a_miss_and_written_again(fresh_cache):
    assert imported(Block(), X) == "miss"
    (entry,) = fresh_cache.glob("imports/*.cvi")
    entry.write_bytes(entry.read_bytes()[:-5])
    with pytest.warns(RuntimeWarning, match="imports cache entry .* is damaged"):
        assert imported(Block(), X) == "miss"
    assert imported(Block(), X) == "hit"


def test_cache_false_does_not_use_the_import_cache(monkeypatch):
    def refuse(*args):
        raise AssertionError("the import cache was used")

    monkeypatch.setattr("cuvil.cache.imports.fingerprint_of", refuse)
    monkeypatch.setattr("cuvil.cache.imports.lookup", refuse)
    fast = cuvil.compile(Constant(), (X,), cache=False)
    torch.testing.assert_close(fast(X), Constant()(X))
    assert "import" in fast.compile_trace.totals


WARM = textwrap.dedent("""
    import json, sys, torch, cuvil
    from torch import nn
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.w = nn.Parameter(torch.randn(8))
            self.act = nn.LeakyReLU(0.1)
            self.k = 0.5
        def forward(self, x):
            return self.act(x * self.w) + self.k
    model = Net().eval()
    x = torch.randn(4, 8)
    fast = cuvil.compile(model, (x,), threads=int(sys.argv[1]))
    seen = {"dynamo": "torch._dynamo" in sys.modules, "stages": list(fast.compile_trace.totals),
            "program": fast.report.program_cache}
    print(json.dumps({**seen, "close": torch.allclose(fast(x), model(x), atol=1e-5),
                      "import": fast.report.graph.import_report.cache}))
""")


def test_a_warm_compile_in_a_new_process_never_imports_dynamo(tmp_path):
    """Three processes share a cache directory (the session's): the second compiles for
    another thread count (another program, the same imported graph), the third as the
    second (the program cache's hit)."""
    import json

    script = tmp_path / "warm.py"
    script.write_text(WARM)
    env = {**os.environ, "CUVIL_CACHE_DIR": os.environ["CUVIL_CACHE_DIR"]}
    runs = [json.loads(subprocess.run([sys.executable, str(script), threads], env=env,
                                      check=True, capture_output=True,
                                      text=True).stdout.splitlines()[-1])
            for threads in ("1", "2", "2")]
    assert all(r["close"] for r in runs), runs
    warm, program = runs[1], runs[2]
    assert warm["program"] == "" and warm["import"].startswith("hit")
    assert "import (cached)" in warm["stages"] and not warm["dynamo"]
    assert program["program"].startswith("hit") and program["stages"] == ["program cache"]
    assert not program["dynamo"]
