"""Imported weights are constants held by reference (the very tensors); primitive ops
carry no bias, so biased linear layers and convolutions are split at import, with folded
constants for the transposed weight and the broadcastable bias."""

from __future__ import annotations

import os

import torch
from torch import nn

import cuvil
from cuvil.frontend.report import source_of
from cuvil.ops.execute import run


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.norm = nn.LayerNorm(4, elementwise_affine=False)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        y = self.bn(self.conv(x)).mean((2, 3))
        return self.fc(self.norm(y))


def imported():
    model = Net().eval()
    return model, cuvil.from_torch(model, (torch.randn(2, 3, 6, 6),))


def test_weights_and_buffers_are_the_very_tensors():
    model, graph = imported()
    for key, tensor in model.state_dict(keep_vars=True).items():
        if key in graph.constants:
            assert graph.constants[key] is tensor, key
    assert graph.constants["bn.running_var"] is model.bn.running_var
    assert "bn.num_batches_tracked" not in graph.constants  # unused: pruned


def test_linear_is_matmul_with_a_transposed_constant_plus_bias():
    model, graph = imported()
    matmul = next(n for n in graph if n.op == "matmul")
    weight_t = graph[matmul.inputs[1]]
    assert weight_t.op == "const" and weight_t.attrs["ref"] == "fc.weight.T"
    assert torch.equal(graph.constants["fc.weight.T"], model.fc.weight.t())
    assert graph.constants["fc.weight.T"].is_contiguous()
    add = next(n for n in graph if n.op == "add" and matmul.name in n.inputs)
    assert graph[add.inputs[1]].attrs["ref"] == "fc.bias"


def test_conv_bias_is_a_broadcast_add():
    model, graph = imported()
    conv = next(n for n in graph if n.op == "conv2d")
    assert len(conv.inputs) == 2
    add = next(n for n in graph if n.op == "add" and conv.name in n.inputs)
    bias = graph[add.inputs[1]]
    assert bias.type.shape == (4, 1, 1)
    torch.testing.assert_close(graph.constants[bias.attrs["ref"]].flatten(), model.conv.bias)


def test_a_norm_without_weights_gets_ones_and_zeros():
    _, graph = imported()
    norm = next(n for n in graph if n.op == "layer_norm")
    weight, bias = (graph.constants[graph[i].attrs["ref"]] for i in norm.inputs[1:])
    assert torch.equal(weight, torch.ones(4)) and torch.equal(bias, torch.zeros(4))


def test_split_graph_matches_eager():
    model, graph = imported()
    x = torch.randn(5, 3, 6, 6)
    with torch.no_grad():
        torch.testing.assert_close(run(graph, x), model(x))


def test_every_node_points_at_the_model_line_it_came_from():
    _, graph = imported()
    here, cwd = os.path.abspath(__file__), os.getcwd() + os.sep
    here = here[len(cwd):] if here.startswith(cwd) else here
    ops = [n for n in graph if n.op not in ("input", "const", "scalar")]
    assert ops and all(n.source.startswith(here + ":") for n in ops)
    conv = next(n for n in graph if n.op == "conv2d")
    line = int(conv.source.rsplit(":", 1)[1])
    with open(__file__) as f:
        assert "self.bn(self.conv(x))" in f.readlines()[line - 1]


def test_source_skips_torch_frames():
    class FakeNode:
        meta = {"stack_trace": (
            'File "/home/u/model.py", line 9, in forward\n    y = self.fc(x)\n'
            f'File "{os.path.dirname(torch.__file__)}/nn/modules/linear.py", line 134, in '
            'forward\n    return F.linear(input, self.weight, self.bias)\n')}

    source = source_of(FakeNode())
    assert (source.where, source.code) == ("/home/u/model.py:9", "y = self.fc(x)")


class Buffers(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.full((3,), 2.0), persistent=False)

    def forward(self, x):
        return x * self.scale + torch.tensor([1.0, 2.0, 3.0])


def test_non_persistent_buffers_and_tensors_made_in_forward_are_constants():
    model = Buffers()
    graph = cuvil.from_torch(model, (torch.randn(2, 3),))
    assert graph.constants["scale"] is model.scale
    assert graph.ops() == ["mul", "add"] and not graph.import_report.fallbacks
    x = torch.randn(4, 3)
    torch.testing.assert_close(run(graph, x), model(x))
