"""Every zoo model imports with a dynamic batch dim, and the one imported graph matches
torch eager (max abs error <= 1e-5 in f32) at two batch sizes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cuvil import zoo
from cuvil.errors import CuvilError
from cuvil.ir import sym
from cuvil.ops.execute import run

TOLERANCE = 1e-5


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_imported_graph_matches_eager_at_two_batch_sizes(name, zoo_graph):
    model, graph = zoo_graph(name)
    assert graph[graph.inputs[0]].type.shape[0] == sym("batch")
    assert graph.import_report.dynamic and not graph.import_report.fallbacks
    for batch in (1, 3):
        _, inputs = zoo.get(name, batch=batch)
        with torch.no_grad():
            want = model(*inputs)
        got = run(graph, *inputs)
        assert got.shape == want.shape and got.dtype == torch.float32
        assert (got - want).abs().max().item() <= TOLERANCE


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_factories_are_deterministic_and_in_eval_mode(name):
    (m1, x1), (m2, x2) = zoo.get(name, batch=2), zoo.get(name, batch=2)
    assert not m1.training and isinstance(x1, tuple)
    assert all(torch.equal(a, b) for a, b in zip(x1, x2, strict=True))
    for (k, a), (_, b) in zip(m1.state_dict().items(), m2.state_dict().items(), strict=True):
        assert torch.equal(a, b), k


def ops_of(graph) -> list[str]:
    return graph.ops()


def test_cnn_has_two_back_to_back_convolutions(zoo_graph):
    _, graph = zoo_graph("cnn")
    convs = [n for n in graph if n.op == "conv2d"]
    assert any(graph[n.inputs[0]].op == "conv2d" for n in convs)
    assert min(n.type.shape[1] for n in convs) >= 8
    for op in ("batch_norm", "relu", "max_pool2d", "adaptive_avg_pool2d", "matmul"):
        assert op in ops_of(graph)


def test_mobilenet_has_a_depthwise_convolution_and_relu6(zoo_graph):
    _, graph = zoo_graph("mobilenet")
    depthwise = [n for n in graph if n.op == "conv2d" and n.attrs["groups"] > 1]
    assert depthwise and all(n.attrs["groups"] == n.type.shape[1] for n in depthwise)
    assert "relu6" in ops_of(graph) and "batch_norm" in ops_of(graph)


def test_gpt2_block_writes_causal_attention_out(zoo_graph):
    _, graph = zoo_graph("gpt2")
    ops = ops_of(graph)
    assert {"layer_norm", "matmul", "masked_fill", "softmax"} <= set(ops)
    assert any(n.op == "gelu" and n.attrs["approximate"] == "tanh" for n in graph)
    assert "attn.causal_mask" in graph.constants


def test_transformer_is_torchs_encoder_layer():
    model, (x,) = zoo.get("transformer")
    assert isinstance(model, nn.TransformerEncoderLayer) and model.self_attn.batch_first
    assert model.self_attn.embed_dim == 256 and model.self_attn.num_heads == 4
    assert model.linear1.out_features == 1024 and x.shape == (8, 128, 256)


def test_mlp_is_784_512_512_10():
    model, (x,) = zoo.get("mlp")
    assert [layer.out_features for layer in model.layers] == [512, 512, 10]
    assert x.shape[1] == 784


def test_unknown_model_is_a_clear_error():
    with pytest.raises(CuvilError, match="no zoo model 'resnet50'; known: mlp, .*, hf_bert$"):
        zoo.get("resnet50")
