"""CUDA attention (`cuvil/lower/cuda/attention.py`) against the reference executor, under
the CUDA simulator: scaled_dot_product_attention with a scale, a broadcast mask, causal,
and the same computation written out (matmul with k transposed, scaling, softmax, matmul)."""

from __future__ import annotations

import pytest
from cuda_support import check, on_cuda

Q, K, V = (2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 3)


def sdpa(attrs: dict):
    full = {"is_causal": False, "scale": None, **attrs}
    return lambda g, *qkv: g.add("scaled_dot_product_attention", list(qkv), full)


CASES = {
    "default_scale": ([Q, K, V], {}),
    "scale_and_mask": ([Q, K, V, (2, 1, 3, 5)], {"scale": 0.3}),
    "causal": ([Q, K, V], {"is_causal": True}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_attention_matches_reference(case, lower):
    shapes, attrs = CASES[case]
    compiled = check(on_cuda(shapes, sdpa(attrs)), shapes, lower, {"attention"})
    assert "online softmax" in compiled.source


def test_written_out_attention_is_one_cuda_kernel(lower):
    shapes = [(1, 2, 3, 4)] * 3

    def build(g, q, k, v):
        kt = g.add("transpose", [k], {"dim0": -2, "dim1": -1})
        s = g.add("mul", [g.add("matmul", [q, kt]), g.scalar(0.5)])
        return g.add("matmul", [g.add("softmax", [s], {"dim": -1}), v])

    compiled = check(on_cuda(shapes, build), shapes, lower, {"attention"})
    assert {k.template for k in compiled.report.kernels} == {"attention", "transfer"}
