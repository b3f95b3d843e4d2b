"""The compile cache keys on the traced program: models that differ only in a Python
attribute, a constructor argument or a run-time choice of op never share an entry, in one
process or across two; a damaged entry is rebuilt; a miss says what changed since the last
compile of the same model (never of another of that class name); a hit's report
times only the stages that ran (no encode, saturate or extract)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

import cuvil
from cuvil import cache, zoo
from cuvil.library import load as load_rules
from cuvil.lower.compile_targets import device_costs
from cuvil.options import CompileOptions


class Scale(torch.nn.Module):
    def __init__(self, k: float):
        super().__init__()
        self.k = k

    def forward(self, x):
        return x * self.k


class Act(torch.nn.Module):
    """An op chosen at run time: `self.fn` is read by forward, not by the class."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.fn(self.lin(x))


def compiled_state(model, x):
    """(result, cache status) of compiling `model` with the default cache."""
    fast = cuvil.compile(model, (x,))
    return fast(x), fast.report.optimizer.cache


def test_python_attribute_is_part_of_the_program(fresh_cache):
    x = torch.ones(4, 8)
    for k in (2.0, 3.0, 2.0):
        y, status = compiled_state(Scale(k), x)
        torch.testing.assert_close(y, Scale(k)(x))
    assert status.startswith("hit")


@pytest.mark.parametrize("slopes", [(0.1, 0.5)])
def test_constructor_argument_is_part_of_the_program(fresh_cache, slopes):
    x = torch.randn(3, 16)
    for slope in slopes:
        model = torch.nn.LeakyReLU(slope)
        torch.testing.assert_close(compiled_state(model, x)[0], model(x))


def test_op_chosen_at_run_time_is_part_of_the_program(fresh_cache):
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    model = Act(torch.relu)
    torch.testing.assert_close(compiled_state(model, x)[0], model(x))
    model.fn = torch.tanh  # same class, same weights, another program
    y, status = compiled_state(model, x)
    torch.testing.assert_close(y, model(x))
    assert status == "miss: program changed since the last compile of 'Act'"


def test_new_weights_reuse_the_optimization_and_compute_with_the_new_weights(fresh_cache):
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    model = Act(torch.relu)
    compiled_state(model, x)
    with torch.no_grad():
        model.lin.weight.mul_(-3.0)
    y, status = compiled_state(model, x)
    torch.testing.assert_close(y, model(x))
    assert status == "hit (local, the same program with other weights): optimization skipped"
    assert compiled_state(model, x)[1].startswith("hit (program cache")


class ConvBn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(self.conv(x))


def test_weights_folded_by_the_optimizer_are_never_reused_for_new_weights(fresh_cache):
    torch.manual_seed(0)
    model, x = ConvBn().eval(), torch.randn(2, 3, 8, 8)
    compiled_state(model, x)
    assert not list(fresh_cache.glob("graphs/*.cvg"))[1:], "expected no any-values entry"
    with torch.no_grad():
        model.bn.weight.mul_(2.0)
    y, status = compiled_state(model, x)
    torch.testing.assert_close(y, model(x))
    assert status == "miss: constants changed since the last compile of 'ConvBn'"


def test_key_depends_on_rules_options_and_input_shapes(zoo_graph):
    model, graph = zoo_graph("mlp")
    params = device_costs(("cpu",))
    settings = CompileOptions().optimizer_key({"batch": 2}, params)
    key = cache.key_of(graph, None, settings)
    assert key == cache.key_of(graph.copy(), None, settings)
    other_rules = cache.key_of(graph, "rule r: relu(x) => x\n", settings)
    assert other_rules.parts["rules"] != key.parts["rules"]
    disabled = CompileOptions(disable=("fusion",)).optimizer_key({"batch": 2}, params)
    assert cache.key_of(graph, None, disabled).digest != key.digest
    static = cuvil.from_torch(model, (torch.randn(3, 784),), dynamic_shapes=False)
    assert cache.key_of(static, None, settings).parts["program"] != \
        key.parts["program"]


def test_round_trip_keeps_imported_weights_by_reference(fresh_cache):
    model, inputs = zoo.get("cnn", batch=2)
    graph = cuvil.from_torch(model, inputs)
    key = cache.key_of(graph, None, {})
    assert cache.load(key, graph, dict) is None
    optimized = cuvil.optimize(graph)
    cache.store(key, optimized, graph)
    again = cache.load(key, cuvil.from_torch(model, inputs), lambda: dict(load_rules().ops))
    assert again.to_text() == optimized.to_text()
    own = {t.data_ptr() for t in model.state_dict().values()}
    shared = [r for r, t in again.constants.items() if t.data_ptr() in own]
    assert shared
    assert again.report.cache.startswith("hit")
    torch.testing.assert_close(cuvil.run(again, *inputs), model(*inputs))


def test_damaged_entry_is_rebuilt(fresh_cache):
    x = torch.ones(2, 8)
    compiled_state(Scale(5.0), x)
    for entry in fresh_cache.glob("graphs/*.cvg"):
        entry.write_bytes(entry.read_bytes()[:-7])  # truncated
    shutil.rmtree(fresh_cache / "programs")  # else the program cache serves it
    with pytest.warns(RuntimeWarning, match="graphs cache entry .* is damaged"):
        y, status = compiled_state(Scale(5.0), x)
    torch.testing.assert_close(y, Scale(5.0)(x))
    assert status == "miss: the entry for 'Scale' is missing or damaged"


SCRIPT = textwrap.dedent("""
    import sys, torch, cuvil
    class Scale(torch.nn.Module):
        def __init__(self, k):
            super().__init__(); self.k = k
        def forward(self, x):
            return x * self.k
    x = torch.ones(4, 8)
    fast = cuvil.compile(Scale(float(sys.argv[1])), (x,))
    print(fast(x)[0, 0].item(), fast.report.optimizer.cache.split()[0])
""")


def test_two_processes_share_entries_only_for_the_same_program(fresh_cache, tmp_path):
    script = tmp_path / "scale.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "CUVIL_CACHE_DIR": str(fresh_cache)}
    seen = []
    for k in ("2", "3", "2"):
        out = subprocess.run([sys.executable, str(script), k], env=env, check=True,
                             capture_output=True, text=True).stdout.split()
        seen.append((float(out[0]), out[1]))
    assert seen == [(2.0, "miss:"), (3.0, "miss:"), (2.0, "hit")]


class TwoScales(torch.nn.Module):
    def forward(self, x):
        return x * 2.0 * 3.0  # the optimizer folds 2 * 3 into a constant of its own


def test_a_damaged_constant_made_by_the_optimizer_is_rebuilt(fresh_cache):
    x = torch.randn(2, 8)
    y, _ = compiled_state(TwoScales(), x)
    (entry,) = fresh_cache.glob("graphs/*.cvg")
    data = entry.read_bytes()
    assert b'"~fold' in data, "the optimizer made no constant: the test needs one"
    entry.write_bytes(data[:-4] + b"\x00" * 4)  # the constant's bytes, same size
    shutil.rmtree(fresh_cache / "programs")  # else the program cache serves it
    with pytest.warns(RuntimeWarning, match="graphs cache entry .* is damaged"):
        again, status = compiled_state(TwoScales(), x)
    torch.testing.assert_close(again, TwoScales()(x))
    assert status == "miss: the entry for 'TwoScales' is missing or damaged"


def time_line(report) -> str:
    """The report's `time:` line ("" if it has none)."""
    return next((ln for ln in str(report).splitlines() if ln.startswith("time:")), "")


def test_a_cache_hit_reports_no_optimizer_stage(fresh_cache):
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    model = Act(torch.relu)
    missed = cuvil.compile(model, (x,)).report.optimizer
    assert {"encode", "saturate", "extract"} <= set(missed.timings)
    with torch.no_grad():
        model.lin.weight.mul_(-3.0)
    hit = cuvil.compile(model, (x,)).report.optimizer
    assert hit.cache.startswith("hit (local")
    assert "cache lookup" in hit.timings and "cache lookup" in time_line(hit)
    assert not {"encode", "saturate", "extract"} & set(hit.timings)
    assert "stopped (when the cached graph was made)" in str(hit)
    stored = cuvil.compile(model, (x,)).report
    assert stored.program_cache.startswith("hit")
    assert stored.optimizer.timings == {} and time_line(stored.optimizer) == ""
    assert not any(ln.startswith("time:") for ln in str(stored).splitlines())


def named_net(width: int) -> torch.nn.Module:
    """A model of class `Net` with a hidden layer of `width`: another model per width."""

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(8, width), torch.nn.Linear(width, 4)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    return Net().eval()


def test_a_miss_is_never_compared_with_another_model_of_the_same_name(fresh_cache):
    x = torch.randn(4, 8)
    assert compiled_state(named_net(16), x)[1].startswith("miss: no earlier compile")
    status = compiled_state(named_net(32), x)[1]
    assert status == "miss: no earlier compile of 'Net' with these parameters in this cache"


def test_a_miss_without_calibration_names_no_calibration_change(fresh_cache):
    torch.manual_seed(0)
    model, x = named_net(16), torch.randn(4, 8)
    cuvil.compile(model, (x,), quantize=cuvil.Quantize(calibration=[(x,), (x * 0.5,)]))
    status = compiled_state(model, x)[1]
    assert status.startswith("miss: ") and "calibration changed" not in status
    assert "no calibration now (the last compile was calibrated)" in status
