"""`cuvil.register_target`: a single-threaded CPU target (the docs' worked example) compiles
a zoo model that matches torch; its cost parameters price the CPU device; a `.cvr` rule
guarded by `has_target("cpu1")` fires on it only; an unknown target is a one-line error."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import cuvil
from cuvil.lower.target import get_target

STOCK = Path(cuvil.__file__).parent / "stock_rules"
CPU1_RULES = '''ruleset one_thread
# b + x @ w == x @ w + b (the single-threaded target's own spelling, for the example)
rule bias_first_cpu1: add(matmul(x, w), b) => add(b, matmul(x, w))
    where has_target("cpu1")
'''


@pytest.fixture(scope="module")
def cpu1():
    return cuvil.register_target("cpu1", params={"gflops": 75.0, "gbps": 12.0,
                                                 "launch_us": 1.0}, parallel=False)


def test_single_threaded_target_compiles_a_zoo_model(cpu1):
    model, inputs = cuvil.zoo.get("mlp", batch=3)
    fast = cuvil.compile(model, inputs, target="cpu1", threads=2, cache=False)
    with torch.no_grad():
        torch.testing.assert_close(fast(*inputs), model(*inputs), atol=1e-5, rtol=1e-5)
    assert fast.report.target == "cpu1"
    assert "parallel=True" not in fast.source
    # its layers are the runtime's `mlp_head_post` (no kernel to generate), given one thread
    entry_body = fast.source.split("def entry(", 1)[1].split("\n", 1)[1]
    assert "mlp_head_post" in fast.source and "n_threads" not in entry_body


def test_it_brings_cost_parameters_and_falls_back_to_cpu_kernels(cpu1):
    assert cpu1.cost_params == {"gflops": 75.0, "gbps": 12.0, "launch_us": 1.0}
    assert get_target("cpu1") is cpu1
    assert set(get_target("cpu").generators) <= set(cpu1.generators)
    from cuvil.lower.compile_targets import device_costs

    assert device_costs(("cpu1",))["cpu"]["gflops"] == 75.0


def test_kernels_replace_families(cpu1):
    def no_gemm(group, ctx):
        from cuvil.lower.spec import Unsupported

        raise Unsupported("this target has no GEMM")

    mine = cuvil.register_target("nogemm", kernels={"gemm": no_gemm})
    assert mine.generators["gemm"] is no_gemm
    assert mine.generators["elementwise"] is get_target("cpu").generators["elementwise"]


def test_a_rule_can_ask_for_the_target(cpu1):
    model, inputs = cuvil.zoo.get("mlp", batch=3)
    rules = [STOCK, CPU1_RULES]
    # a target registered in Python is not one the verifier knows: the guard never holds
    on_cpu1 = cuvil.optimize(model, inputs, rules=rules, target="cpu1", verify=False)
    on_cpu = cuvil.optimize(model, inputs, rules=rules, target="cpu", verify=False)
    on_cpu1, on_cpu = on_cpu1.report.rules, on_cpu.report.rules
    assert on_cpu1["bias_first_cpu1"].matches > 0
    assert "bias_first_cpu1" not in on_cpu or on_cpu["bias_first_cpu1"].matches == 0


def test_a_target_without_a_backend_is_a_one_line_error():
    model, inputs = cuvil.zoo.get("mlp", batch=2)
    for call in (cuvil.compile, cuvil.optimize):
        with pytest.raises(cuvil.CuvilError) as e:
            call(model, inputs, target="vulkan")
        text = str(e.value)
        assert "\n" not in text and "'vulkan'" in text and "cpu, " in text and "cuda" in text


def test_bad_parameters_are_refused():
    with pytest.raises(cuvil.CuvilError, match="gflops"):
        cuvil.register_target("broken", params={"gflops": -1})
    with pytest.raises(cuvil.CuvilError, match="needs"):
        cuvil.register_target("bare", base=None)
