"""`Profile.kernel_table`: each kernel's FLOPs and bytes from the catalog, the cost model's
prediction for the nodes it computes (what extraction chose by), and the roofline, checked
against the MLP's arithmetic. No assertion is about how long anything took."""

from __future__ import annotations

import pytest
import torch

import cuvil
from cuvil import zoo

BATCH = 8
# the zoo MLP: one kernel, its three layers (`mlp_relu_relu_linear`)
KERNELS = [[(784, 512), (512, 512), (512, 10)]]


@pytest.fixture(scope="module")
def profiled():
    model, inputs = zoo.get("mlp", batch=4)
    compiled = cuvil.compile(model, inputs)
    return compiled, compiled.profile((torch.randn(BATCH, 784),), runs=2)


def test_one_row_per_step_with_the_step_measured_time(profiled):
    compiled, prof = profiled
    assert [r.name for r in prof.kernels] == [s.name for s in compiled.report.steps]
    assert [r.measured_us for r in prof.kernels] == prof.step_means_us()


def test_flops_and_bytes_are_the_layers_at_the_profiled_batch(profiled):
    _, prof = profiled
    for row, layers in zip(prof.kernels, KERNELS, strict=True):
        product = sum(2 * BATCH * k * n for k, n in layers)
        epilogues = sum(3 * BATCH * n for _, n in layers)  # bias and activation
        assert product <= row.flops <= product + epilogues
        weights = sum(k * n + n for k, n in layers)  # a fused kernel moves no hidden layer
        assert row.bytes == 4 * (BATCH * layers[0][0] + weights + BATCH * layers[-1][1])


def test_predictions_are_the_cost_models_and_the_roofline_is_below_them(profiled):
    compiled, prof = profiled
    graph, costs = compiled.pricing()
    params = costs.params("cpu")
    for step, row in zip(compiled.report.steps, prof.kernels, strict=True):
        assert graph[step.node].op == row.op
        roof = max(row.flops / (1e3 * params["gflops"]), row.bytes / (1e3 * params["gbps"]))
        assert row.roofline_us == pytest.approx(roof)
        assert row.predicted_us >= row.roofline_us > 0


def test_the_table_lists_every_kernel_and_a_total(profiled):
    _, prof = profiled
    lines = prof.kernel_table().splitlines()
    assert lines[0].split()[:3] == ["kernel", "template", "op"]
    assert [ln.split()[0] for ln in lines[1:]] == [r.name for r in prof.kernels] + ["total"]


def test_a_graph_compiled_without_a_cost_model_has_no_table(lower):
    graph = cuvil.from_torch(*zoo.get("mlp", batch=2))
    prof = lower(graph).profile((torch.randn(2, 784),), runs=1)
    assert prof.kernels == [] and prof.kernel_table() == ""
