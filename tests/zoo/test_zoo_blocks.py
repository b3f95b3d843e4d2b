"""The benchmark's block models (ResNet bottleneck, ViT block, MLP-Mixer block, axpy): each
has the structure its name promises, and `cuvil.compile` of it matches torch eager at two
batch sizes with no op left to torch. Sizes as tests/runtime/test_zoo_compiled.py's, so the
session's compile cache serves one test from the other's compile."""

from __future__ import annotations

import pytest
import torch

import cuvil
from cuvil import zoo

TOLERANCE = 1e-4
SMALL = {"resnet": {"size": 8}, "vit": {"size": 16, "dim": 32, "heads": 2},
         "mixer": {"tokens": 16, "dim": 32}, "axpy": {"size": 1000}}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_compiled_block_matches_eager_without_fallbacks(name, kernel_cache, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(kernel_cache))
    model, inputs = zoo.get(name, batch=2, **SMALL[name])
    compiled = cuvil.compile(model, inputs)
    assert not compiled.report.fallbacks
    for batch in (1, 3):
        _, fresh = zoo.get(name, batch=batch, **SMALL[name])
        with torch.no_grad():
            want = model(*fresh)
        got = compiled(*fresh)
        assert got.shape == want.shape
        assert (got - want).abs().max().item() <= TOLERANCE, name


def test_resnet_is_a_bottleneck_with_an_identity_residual(zoo_graph):
    _, graph = zoo_graph("resnet")
    convs = [n for n in graph if n.op == "conv2d"]
    assert [n.type.shape[1] for n in convs] == [16, 16, 64]
    assert [graph[n.inputs[1]].type.shape[2] for n in convs] == [1, 3, 1]
    assert graph.ops().count("batch_norm") == 3 and graph.ops().count("relu") == 3
    assert any(n.op == "add" and graph.inputs[0] in n.inputs for n in graph)


def test_vit_embeds_patches_and_writes_attention_out(zoo_graph):
    _, graph = zoo_graph("vit")
    embed = next(n for n in graph if n.op == "conv2d")
    assert embed.attrs["stride"] == (4, 4) and embed.type.shape[1:] == (128, 8, 8)
    assert {"layer_norm", "matmul", "softmax", "gelu"} <= set(graph.ops())
    assert graph[graph.outputs[0]].type.shape[1:] == (64, 128)


def test_mixer_mixes_tokens_through_a_transpose(zoo_graph):
    _, graph = zoo_graph("mixer")
    assert graph.ops().count("layer_norm") == 2 and graph.ops().count("gelu") == 2
    token_mlp = next(n for n in graph if n.op == "matmul")
    assert graph[token_mlp.inputs[0]].op == "transpose"
    assert graph[token_mlp.inputs[1]].type.shape == (64, 128)  # over the 64 patches
    assert graph[graph.outputs[0]].type.shape[1:] == (64, 128)


def test_axpy_is_one_scaled_add_of_two_vectors():
    model, (x, y) = zoo.get("axpy")
    assert x.shape == y.shape == (1, 100_000)
    torch.testing.assert_close(model(x, y), 2.5 * x + y, rtol=0, atol=0)
