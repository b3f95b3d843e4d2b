"""The kernel families a composite op may name: each family's fact accepts the bodies its
templates compute (the stock library's among them) and says why it refuses another."""

from __future__ import annotations

import pytest

from cuvil.dsl.kernels import FAMILIES, body_misfit, family
from cuvil.library import load
from cuvil.ops import registry


def ops_of(*names: str) -> list[tuple[str, str]]:
    return [(n, registry.get(n).lowering) for n in names]


def test_every_stock_fused_op_names_a_family_whose_fact_its_body_fits():
    ops = load().ops
    assert ops and all(op.kernel in FAMILIES for op in ops.values())
    by_family = {op.kernel for op in ops.values()}
    assert by_family == {"gemm", "conv", "mlp", "qgemm", "qconv"}


@pytest.mark.parametrize("name, body", [
    ("elementwise", ("mul", "add", "relu")),
    ("gemm", ("matmul", "add", "gelu", "add")),
    ("conv", ("conv2d", "add", "relu", "max_pool2d")),
    ("mlp", ("matmul", "add", "relu", "matmul", "add", "relu", "matmul", "add")),
    ("qgemm", ("quantize", "matmul_i8", "dequantize", "mul", "add", "relu", "quantize")),
    ("qconv", ("quantize", "conv2d_i8", "dequantize", "mul", "add")),
    ("attention", ("transpose", "matmul", "mul", "softmax", "matmul")),
])
def test_a_body_its_family_computes_fits(name, body):
    assert body_misfit(family(name), ops_of(*body)) == ""


@pytest.mark.parametrize("name, body, why", [
    ("gemm", ("add",), "takes 1 matmul call(s), the body has 0"),
    ("mlp", ("matmul", "relu", "matmul", "relu", "matmul", "relu", "matmul"),
     "takes 2 to 3 matmul call(s), the body has 4"),
    ("gemm", ("matmul", "softmax"), "has no place for softmax"),
    ("conv", ("conv2d", "max_pool2d", "relu"), "has no place for max_pool2d"),  # pool ends it
    ("elementwise", ("relu", "sum"), "has no place for sum"),
    ("qgemm", ("quantize", "conv2d_i8", "dequantize"), "takes 1 matmul_i8 call(s)"),
])
def test_a_body_its_family_does_not_compute_is_refused_with_the_reason(name, body, why):
    assert why in body_misfit(family(name), ops_of(*body))


def test_an_unknown_family_is_none():
    assert family("gemv") is None
