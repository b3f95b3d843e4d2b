"""Two linear layers with a ReLU between them lower to one call of `runtime.mlp.mlp_post`
(`templates.mlp`, from the `mlp_relu` rules), and with an output layer after them to one
call of `mlp_head_post`: against torch eager at rows that share one region and rows that
run the products apart, inputs of rank 3, one and two threads; without the head rule the
first two of three layers pair up (the cost of a pair whose second product is a
classifier's); a pair or head the template cannot take loses its last layer."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import cuvil
from cuvil.targets.cpu.kernels import mlp as runtime
from cuvil.targets.cpu.templates import mlp as template


def _check(compiled, model, *shape):
    x = torch.randn(*shape)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)


def _headers(compiled) -> list[str]:
    return [line for line in compiled.source.splitlines() if line.startswith("#   v")]


def _templates(compiled) -> list[str]:
    """The template of each kernel call, in call order."""
    kinds = {k.name: k.spec.template for k in compiled._program.kernels}
    return [kinds[call.split("(")[0]] for call in compiled._program.calls]


@pytest.mark.parametrize("outer", ["none", "relu"])
def test_a_pair_is_one_call_and_matches_torch(outer):
    torch.manual_seed(0)
    layers = [nn.Linear(40, 256), nn.ReLU(), nn.Linear(256, 288)] + \
        ([nn.ReLU()] if outer == "relu" else [])
    model = nn.Sequential(*layers).eval()
    for threads, rows in ((2, ()), (1, ()), (2, (3,))):  # rows: the dims after the batch
        compiled = cuvil.compile(model, (torch.randn(1, *rows, 40),), threads=threads)
        assert _templates(compiled) == ["mlp"]
        assert "k0_mlp = mlp_post  #" in compiled.source
        for batch in (1, template.FUSED_ROWS, template.FUSED_ROWS + 1, 50):
            _check(compiled, model, batch, *rows, 40)


def test_three_layers_are_one_call_a_pair_and_its_head():
    """784-512-512-10 (the zoo's MLP): one call of `mlp_head_post`, at rows that share the
    pair's region and rows that run three products."""
    model, inputs = cuvil.zoo.get("mlp", batch=1)
    compiled = cuvil.compile(model, inputs)
    assert _templates(compiled) == ["mlp"]
    assert "k0_mlp = mlp_head_post  #" in compiled.source
    assert "mlp_relu_relu_linear(x, layers_0_weight_T" in _headers(compiled)[0]
    for batch in (1, template.FUSED_ROWS + 1, 33):
        _check(compiled, model, batch, 784)


def test_without_the_head_rule_the_pair_is_the_first_two_layers():
    """Layer 2's 512 x 10 product is one thread's either way, so pairing it with layer 1
    would save no region: the pair's price says so."""
    model, inputs = cuvil.zoo.get("mlp", batch=1)
    compiled = cuvil.compile(model, inputs, disable=["mlp_relu_relu_linear"])
    assert _templates(compiled) == ["mlp", "gemm"]
    assert "mlp_relu_relu(x, layers_0_weight_T, layers_0_bias, layers_1_weight_T" in \
        _headers(compiled)[0]
    _check(compiled, model, 1, 784)


def test_a_head_whose_output_weight_is_not_a_constant_is_a_pair_and_a_product():
    """The template refuses the head (its last weight is an input), and lowering splits
    off the last layer only: the pair stays one call."""
    torch.manual_seed(0)
    model = _HeadOfInput().eval()
    inputs = (torch.randn(1, 40), torch.randn(256, 10))
    compiled = cuvil.compile(model, inputs, threads=2)
    assert "rules: mlp_relu_relu_linear (rules/fusion/mlp.cvr" in compiled.source
    assert _templates(compiled) == ["mlp", "gemm"]
    assert "k0_mlp = mlp_post  #" in compiled.source
    for batch in (1, 20):
        x, w = torch.randn(batch, 40), torch.randn(256, 10)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x, w), model(x, w), atol=1e-4, rtol=1e-4)


class _HeadOfInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.pair = nn.Sequential(nn.Linear(40, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU())
        self.bias = nn.Parameter(torch.randn(10))

    def forward(self, x, w):
        return self.pair(x) @ w + self.bias


def test_a_pair_the_template_cannot_take_is_its_two_layers():
    """A second layer narrower than a panel (4096 x 16: the pair's price is its own, but
    the driver takes panels): each layer is its own product with its epilogue, not one
    kernel per node."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 4096), nn.ReLU(), nn.Linear(4096, 16)).eval()
    compiled = cuvil.compile(model, (torch.randn(1, 64),), threads=2)
    assert "rules: mlp_relu (rules/fusion/mlp.cvr" in compiled.source  # chosen, split
    assert _templates(compiled) == ["gemm", "gemm"]
    _check(compiled, model, 1, 64)
    _check(compiled, model, 20, 64)


def test_turning_the_ruleset_off_leaves_two_layers():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(40, 256), nn.ReLU(), nn.Linear(256, 288)).eval()
    compiled = cuvil.compile(model, (torch.randn(1, 40),), disable=["fusion_mlp"])
    assert _templates(compiled) == ["gemm", "gemm"]
    _check(compiled, model, 1, 40)


def test_lowering_and_the_runtime_agree_on_the_rows_that_share_a_region():
    assert template.FUSED_ROWS == runtime.FUSED_ROWS


SIDE_BY_SIDE = """
ruleset two_products
op two_products(x, w1, w2) = add(matmul(x, w1), matmul(x, w2)) kernel mlp
rule two_products: add(matmul(x, w1), matmul(x, w2)) => two_products(x, w1, w2)
"""


class _SideBySide(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1, self.w2 = nn.Parameter(torch.randn(40, 64)), nn.Parameter(torch.randn(40, 64))

    def forward(self, x):
        return x @ self.w1 + x @ self.w2


def test_two_products_that_are_not_layers_of_a_pair_still_lower():
    """A user's fused op of two products side by side: the pair's template refuses it
    (the second does not read the first) and its products are lowered apart."""
    torch.manual_seed(0)
    model = _SideBySide().eval()
    compiled = cuvil.compile(model, (torch.randn(1, 40),), rules=[None, SIDE_BY_SIDE])
    assert "rules: two_products" in compiled.source and "mlp" not in _templates(compiled)
    _check(compiled, model, 3, 40)
