"""The reference `.cvr` example on the zoo: what fires, what is extracted, and that the result
computes what the model computes."""

from __future__ import annotations

import pytest
import torch

import cuvil
from cuvil import zoo

LAYOUT_COST = 'cost conv2d(x, w) = roofline() * (1 - 0.8 * (layout(x) == "NHWC"))\n'



def _inputs(name: str, batch: int):
    return zoo.get(name, batch=batch)[1]


def _max_err(model, graph, name: str) -> float:
    worst = 0.0
    for batch in (2, 5):  # one graph, two sizes of the symbolic batch dim
        inputs = _inputs(name, batch)
        with torch.no_grad():
            expected = model(*inputs)
        worst = max(worst, (cuvil.run(graph, *inputs) - expected).abs().max().item())
    return worst


@pytest.fixture(scope="module")
def mlp(zoo_graph, reference_rules):
    model, graph = zoo_graph("mlp")
    return model, cuvil.optimize(graph, rules=reference_rules)


def test_mlp_fuses_matmul_add_and_relu(mlp):
    model, out = mlp
    report = out.report
    assert report.rules["matmul_add"].matches > 0
    assert report.rules["linear_relu"].matches > 0
    assert report.rules["linear_relu"].in_result
    ops = out.ops()
    assert ops.count("linear_relu") == 2 and "matmul" not in ops and "relu" not in ops
    assert report.cost_after < report.cost_before
    assert _max_err(model, out, "mlp") <= 1e-5


def test_explain_gives_the_chain_of_rules(mlp, reference_rules):
    _, out = mlp
    node = next(n for n in out if n.op == "linear_relu")
    assert node.origin == ("linear_relu", "matmul_add")
    text = out.report.explain(node)
    assert f"linear_relu ← linear_relu ({reference_rules}:13) ← matmul_add ({reference_rules}:9)" \
        in text
    assert "relu(linear(..)) == linear_relu(..)" in text  # the rule's description
    assert out.report.explain(node.name) == text
    with pytest.raises(cuvil.CuvilError, match="no node"):
        out.report.explain("nonexistent")


def test_report_says_what_happened(mlp):
    _, out = mlp
    report = out.report
    assert report.stop_reason == "saturated"
    assert report.iterations and all(it.size > 0 for it in report.iterations)
    for stage in ("encode", "saturate", "extract", "decode"):
        assert stage in report.timings
    text = str(report)
    assert "matmul_add" in text and "saturated" in text and "->" in text


def test_cnn_converts_convolutions_to_nhwc(zoo_graph, reference_rules):
    model, graph = zoo_graph("cnn")
    plain = cuvil.optimize(graph, rules=reference_rules)
    assert plain.report.rules["conv_nhwc"].matches > 0  # fires, but nothing makes it pay
    assert "to_layout" not in plain.ops()

    out = cuvil.optimize(graph, rules=[reference_rules, LAYOUT_COST])
    convs = [n for n in out if n.op == "conv2d"]
    nhwc = [n for n in convs if n.type.layout == "NHWC"]
    assert nhwc, "the cheaper NHWC convolution is extracted"
    # a convolution feeding a convolution: the conversions between them cancelled
    fed = [n for n in nhwc if out[n.inputs[0]].op == "conv2d"]
    assert fed and out[fed[0].inputs[0]].type.layout == "NHWC"
    assert out.report.rules["layout_roundtrip"].in_result
    assert out.report.cost_after < plain.report.cost_after
    assert _max_err(model, out, "cnn") <= 1e-5


def test_every_zoo_model_stays_equivalent(zoo_graph, reference_rules):
    for name in ("mlp_gelu", "transformer", "gpt2", "mobilenet"):
        model, graph = zoo_graph(name)
        out = cuvil.optimize(graph, rules=reference_rules)
        assert _max_err(model, out, name) <= 1e-4, name


def test_disable_rules_and_rule_families(zoo_graph):
    _, graph = zoo_graph("mlp")
    assert cuvil.optimize(graph).ops() == ["mlp_relu_relu_linear"]  # a pair and its head
    assert cuvil.optimize(graph, disable=["mlp_relu_relu_linear"]).ops() == \
        ["mlp_relu_relu", "linear"]  # the pair the first two layers, not the last two
    assert "linear_relu" in cuvil.optimize(graph, disable=["fusion_mlp"]).ops()
    unfused = cuvil.optimize(graph, disable=["fusion"]).ops()
    assert "linear_relu" not in unfused and "mlp_relu_relu" not in unfused
    without_relu = cuvil.optimize(graph, disable=["linear_relu"]).ops()
    assert "linear" in without_relu and "linear_relu" not in without_relu
    with pytest.raises(cuvil.CuvilError, match="no such rule or ruleset"):
        cuvil.optimize(graph, disable=["fusio"])


def test_explain_names_a_rule_that_merged_two_imported_nodes():
    class ReluRelu(torch.nn.Module):
        def forward(self, x):
            return torch.relu(torch.relu(x)) + 1

    rules = "rule relu_relu: relu(relu(x)) => relu(x)\n"
    out = cuvil.optimize(ReluRelu(), (torch.randn(2, 3),), rules=rules)
    relu = next(n for n in out if n.op == "relu")
    assert out.ops().count("relu") == 1 and relu.origin == ("relu_relu",)
    assert "relu ← relu_relu (<string>:1)" in out.report.explain(relu)
    add = next(n for n in out if n.op == "add")
    assert "imported unchanged" in out.report.explain(add)
