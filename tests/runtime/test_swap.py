"""tests/runtime/test_swap.py: new weights swapped into a compiled model
(`CompiledGraph.load_state_dict`, `with_weights`) give, bit for bit, what a fresh compile of
the new weights gives: an MLP, a CNN whose Conv+BN the optimizer folded, an int8 MLP, and
a program rebuilt from the program cache. Nothing the caller owns is written or aliased; a
change of shape or dtype, or a key that does not match, is a one-line error; a thread
calling throughout a stream of swaps sees one version or the other, never a mix."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import cuvil
from cuvil.errors import CuvilError
from cuvil.frontend import from_torch


def mlp(seed: int, width: int = 32) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, 10)).eval()


def cnn(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3), torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 5)).eval()
    with torch.no_grad():  # statistics of their own, so that the fold has work to do
        model[1].running_mean.uniform_(-1, 1)
        model[1].running_var.uniform_(0.5, 2)
    return model


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def assert_same_program(swapped, fresh) -> None:
    """The same outputs and, array for array, the same constants as a fresh compile."""
    assert len(swapped._consts) == len(fresh._consts)
    for a, b in zip(swapped._consts, fresh._consts, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("make, x", [(mlp, torch.randn(4, 16)),
                                     (cnn, torch.randn(2, 3, 8, 8))], ids=["mlp", "cnn"])
def test_a_swap_gives_what_a_fresh_compile_of_the_new_weights_gives(make, x):
    old, new = make(0), make(1)
    fast = cuvil.compile(old, (x,), cache=False)
    if make is cnn:
        assert any(r.startswith("~fold") for r in fast.graph.constants), "Conv+BN folded"
    before_old, before_new = snapshot(old), snapshot(new)
    fast.load_state_dict(new.state_dict())
    fresh = cuvil.compile(new, (x,), cache=False)
    assert torch.equal(fast(x), fresh(x))
    assert_same_program(fast, fresh)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), new(x), rtol=1e-4, atol=1e-5)
    for model, kept in ((old, before_old), (new, before_new)):  # nothing written
        for k, v in model.state_dict().items():
            assert torch.equal(v, kept[k]), k
    with torch.no_grad():  # nor aliased: the program owns its copies
        for p in new.parameters():
            p.add_(1.0)
    assert torch.equal(fast(x), cuvil.compile(make(1), (x,), cache=False)(x))


def test_an_int8_model_swaps_to_what_a_fresh_int8_compile_gives():
    x = torch.randn(128, 16)
    calibration = [torch.randn(128, 16) for _ in range(4)]

    def compiled(model):
        return cuvil.compile(model, (x,), cache=False,
                             quantize=cuvil.Quantize(calibration=calibration))

    fast, new = compiled(mlp(0, width=256)), mlp(1, width=256)
    assert any(n.op.startswith("q") for n in fast.graph), "some layer is int8"
    fast.load_state_dict(new.state_dict())
    fresh = compiled(new)
    assert torch.equal(fast(x), fresh(x))
    assert_same_program(fast, fresh)


def test_a_program_from_the_program_cache_swaps_as_well():
    x = torch.randn(4, 16)
    cuvil.compile(mlp(0), (x,))
    fast = cuvil.compile(mlp(0), (x,))
    assert fast.report.program_cache.startswith("hit")
    for seed in (1, 2):  # the first rebuilds (no recipes in the entry), the second replays
        fast.load_state_dict(mlp(seed).state_dict())
        fresh = cuvil.compile(mlp(seed), (x,), cache=False)
        assert torch.equal(fast(x), fresh(x))
        assert_same_program(fast, fresh)


def test_with_weights_makes_a_version_and_leaves_the_first_alone():
    x = torch.randn(4, 16)
    fast = cuvil.compile(mlp(0), (x,), cache=False)
    first = fast(x)
    versions = [fast.with_weights(mlp(seed).state_dict()) for seed in (1, 2)]
    assert torch.equal(fast(x), first)
    for seed, version in zip((1, 2), versions, strict=True):
        assert torch.equal(version(x), cuvil.compile(mlp(seed), (x,), cache=False)(x))


def test_shape_dtype_and_key_changes_are_refused_with_one_line():
    x = torch.randn(4, 16)
    fast = cuvil.compile(mlp(0), (x,), cache=False)
    wider = mlp(1, width=33).state_dict()
    with pytest.raises(CuvilError, match=r"0\.weight is \[32, 16\].*given \[33, 16\].*new "
                                         r"compile") as e:
        fast.load_state_dict(wider)
    assert "\n" not in str(e.value)
    state = mlp(1).state_dict()
    with pytest.raises(CuvilError, match="dtype"):
        fast.load_state_dict({**state, "0.bias": state["0.bias"].double()})
    partial = {k: v for k, v in state.items() if k != "0.bias"}
    with pytest.raises(CuvilError, match="missing 0.bias"):
        fast.load_state_dict(partial)
    with pytest.raises(CuvilError, match="unexpected extra"):
        fast.load_state_dict({**state, "extra": torch.zeros(1)})
    fast.load_state_dict(partial, strict=False)  # the others; 0.bias stays the first's
    merged = mlp(1)
    merged[0].bias = mlp(0)[0].bias
    assert torch.equal(fast(x), cuvil.compile(merged, (x,), cache=False)(x))


def test_a_graph_compile_has_no_weights_to_swap():
    x = torch.randn(4, 16)
    graph = from_torch(mlp(0), (x,))
    fast = cuvil.compile(graph, (x,), cache=False)
    with pytest.raises(CuvilError, match="not compiled from a torch module"):
        fast.load_state_dict(mlp(1).state_dict())


def test_calls_during_swaps_see_one_version_or_the_other():
    x = torch.randn(4, 16)
    fast = cuvil.compile(mlp(0), (x,), cache=False)
    states = [mlp(seed).state_dict() for seed in range(2)]
    with torch.no_grad():
        wants = [mlp(seed)(x) for seed in range(2)]
    stop, seen, wrong = threading.Event(), set(), []

    def call() -> None:
        while not stop.is_set():
            y = fast(x)
            match = [i for i, w in enumerate(wants) if torch.allclose(y, w, atol=1e-5)]
            (seen.update if match else wrong.append)(match or [y])

    caller = threading.Thread(target=call)
    caller.start()
    try:
        for i in range(40):
            fast.load_state_dict(states[(i + 1) % 2])
    finally:
        stop.set()
        caller.join()
    assert seen and not wrong
    assert torch.allclose(fast(x), wants[0], atol=1e-5)  # the last swap's


def test_the_versions_bench_serves_twenty_versions_matching_eager(capsys, monkeypatch):
    """`bench/cache.py --versions 20` as CI runs it: every way of serving the versions
    matches eager on its sample (timings are printed, never asserted)."""
    monkeypatch.setenv("CUVIL_CACHE_DIR", os.environ["CUVIL_CACHE_DIR"])  # it sets its own
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench import cache as bench_cache

    bench_cache.main(["--versions", "20", "--compiles", "1", "--model", "mlp"])
    lines = capsys.readouterr().out.splitlines()
    start = lines.index(next(t for t in lines if t.startswith("way ")))
    rows = {" ".join(t.split()[:-5]): t.split() for t in lines[start + 1:start + 5]}
    assert set(rows) == {"cuvil versions", "cuvil in place", "torch.compile", "cuvil.compile"}
    assert rows["cuvil versions"][-5] == "20"
    for way, cells in rows.items():
        assert float(cells[-1]) < 1e-4, (way, cells)

