"""CUDA attention (`cuvil/targets/cuda/templates/attention.py`) against the reference
executor, under the CUDA simulator: scaled_dot_product_attention with a scale, a broadcast
mask, causal, and the same computation written out (matmul with k transposed, scaling,
softmax, matmul);
NaN and +-inf as torch's math backend has them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from cuda_support import check, on_cuda
from torch.nn.attention import SDPBackend, sdpa_kernel

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


def _nonfinite_qkv() -> list[torch.Tensor]:
    """q, k, v of Q, K, V: q's row 1 of slice (0, 0) scores -inf against every key (+inf
    where every key is negative); in slice (0, 1) key 0 scores -inf for every row (-inf in
    k where q is positive) and v's key 4 holds a +inf; q's row 0 of slice (1, 1) a NaN."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(s, generator=g) for s in (Q, K, V))
    k[0, 0, :, 1] = -k[0, 0, :, 1].abs() - 0.1
    q[0, 0, 1] = 0.0
    q[0, 0, 1, 1] = float("inf")
    q[0, 1, :, 3] = q[0, 1, :, 3].abs() + 0.1
    k[0, 1, 0, 3] = float("-inf")
    v[0, 1, 4, 0] = float("inf")
    q[1, 1, 0, 2] = float("nan")
    return [q, k, v]


@pytest.mark.parametrize("causal", [False, True])
def test_cuda_attention_nonfinite_like_math_backend(causal, lower):
    """A -inf score while the running max is still -inf weighs its key 0, and a row of -inf
    scores is 0 @ v (NaN in a +inf column of v), as torch's `_safe_softmax`; NaN stays."""
    compiled = lower(on_cuda([Q, K, V], sdpa({"is_causal": causal})), target=["cuda", "cpu"])
    assert "online softmax" in compiled.source
    inputs = _nonfinite_qkv()
    with sdpa_kernel(SDPBackend.MATH):
        want = F.scaled_dot_product_attention(*inputs, is_causal=causal)
    assert want.isnan().any() and (want == 0).all(-1).any()
    torch.testing.assert_close(compiled(*inputs), want, atol=1e-5, rtol=1e-5, equal_nan=True)
