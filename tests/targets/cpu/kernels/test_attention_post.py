"""`runtime.attention.attention_post` against torch's scaled_dot_product_attention: each
mask kind and broadcast, causal, keys in rows or transposed, a quotient or a product by
the scale, one thread and two; and the lowering of attention groups to it (SDPA and the
same written out), and not of a chain it does not compute."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import cuvil
from cuvil.targets.cpu.kernels.attention import attention_post

B, H, L, S, D = 2, 3, 5, 7, 8
MASKS = {"none": None, "bool row": (1, 1, 1, S), "bool per batch": (B, 1, L, S),
         "bool full": (B, H, L, S), "added": (1, H, L, S)}


def run(q, k, v, mask, kind, scale, divide=False, causal=False, k_rows=True, threads=2,
        inside=0):
    """The driver's result for q, k, v [B, H, L, D]; those whose bit is in `inside` (q 1,
    k 2, v 4, the output 8) are handed over with their heads inside, [B, L, H, D]."""
    heads_in = [np.ascontiguousarray(x.swapaxes(1, 2)) if inside & bit else x
                for bit, x in zip((1, 2, 4), (q, k, v), strict=True)]
    q_, k_, v_ = heads_in
    out = np.full((*q.shape[:-1], v.shape[-1]), np.nan, np.float32)
    out = np.ascontiguousarray(out.swapaxes(1, 2)) if inside & 8 else out
    mask = np.zeros((0,) * 4, np.float32) if mask is None else mask
    keys = np.zeros((threads, q.shape[-1], k.shape[-2]), np.float32) if k_rows else \
        np.zeros((1, 0, 0), np.float32)
    mode = np.array([k_rows, divide, kind, causal, threads > 1, inside, 0, 0, 0], np.int64)
    attention_post(q_, k_ if k_rows else np.ascontiguousarray(k.swapaxes(-1, -2)), v_, mask,
                   mode, np.array([scale], np.float32),
                   np.zeros((threads, q.shape[-2], k.shape[-2]), np.float32), keys, threads, out)
    return out.swapaxes(1, 2) if inside & 8 else out


def inputs(seed: int):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in
            ((B, H, L, D), (B, H, S, D), (B, H, S, D + 2))]


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("threads", [1, 2])
def test_driver_matches_torch(mask, threads):
    q, k, v = inputs(threads)
    rng = np.random.default_rng(7)
    m = None if MASKS[mask] is None else rng.random(MASKS[mask]) > 0.3
    kind = 0 if m is None else 1
    if mask == "added":
        m, kind = rng.standard_normal(MASKS[mask]).astype(np.float32), 2
    if m is not None and kind == 1:
        m[..., 0] = True  # every row keeps one key: no row is all -inf
    expected = nn.functional.scaled_dot_product_attention(
        *map(torch.from_numpy, (q, k, v)), attn_mask=None if m is None else torch.from_numpy(m),
        scale=0.3)
    np.testing.assert_allclose(run(q, k, v, m, kind, 0.3, threads=threads), expected.numpy(),
                               atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("k_rows", [True, False], ids=["keys in rows", "keys transposed"])
def test_causal_and_a_quotient(k_rows):
    q, k, v = inputs(3)
    expected = nn.functional.scaled_dot_product_attention(
        *map(torch.from_numpy, (q, k, v)), is_causal=True, scale=1 / 2.5)
    out = run(q, k, v, None, 0, 2.5, divide=True, causal=True, k_rows=k_rows)
    np.testing.assert_allclose(out, expected.numpy(), atol=2e-6, rtol=1e-5)


def _tail_masks(ql: int, sl: int, rng) -> dict[str, tuple]:
    """(mask, kind, causal, allowed) of each masking whose later keys some rows do not
    see: the causal mask alone and with a boolean mask, and padding (each batch entry's
    keys past its length), boolean and added (-inf)."""
    m = rng.random((B, 1, ql, sl)) > 0.3
    m[..., 0] = True  # every row keeps one key: no row is all -inf
    seen = torch.ones(ql, sl, dtype=torch.bool).tril()  # row i sees keys j <= i
    lengths = [sl // 3, sl]
    pad = np.broadcast_to((np.arange(sl) < np.array(lengths)[:, None])[:, None, None],
                          (B, 1, ql, sl)).copy()
    added = np.where(pad, np.float32(0), np.float32(-np.inf)).astype(np.float32)
    return {"causal": (None, 0, True, seen),
            "causal and a mask": (m, 1, True, seen & torch.from_numpy(m)),
            "padding": (pad, 1, False, torch.from_numpy(pad)),
            "padding added": (added, 2, False, torch.from_numpy(added))}


@pytest.mark.parametrize("ql, sl", [(37, 37), (20, 45), (45, 20)])
@pytest.mark.parametrize("threads", [1, 2])
def test_blocks_take_only_the_keys_they_see(ql, sl, threads):
    """Masked attention runs by blocks of rows, each taking the keys up to the last one
    a row of it sees: several blocks (a partial one last), more keys than queries and
    fewer, keys in rows and transposed, each masking with a tail no row sees."""
    rng = np.random.default_rng(ql + sl)
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for shape in
               ((B, H, ql, D), (B, H, sl, D), (B, H, sl, D + 2)))
    for name, (mask, kind, causal, allowed) in _tail_masks(ql, sl, rng).items():
        expected = nn.functional.scaled_dot_product_attention(
            *map(torch.from_numpy, (q, k, v)), attn_mask=allowed, scale=0.3)
        for k_rows in (True, False):
            out = run(q, k, v, mask, kind, 0.3, causal=causal, k_rows=k_rows, threads=threads)
            np.testing.assert_allclose(out, expected.numpy(), atol=2e-6, rtol=1e-5,
                                       err_msg=name)


@pytest.mark.parametrize("inside", [1, 2, 4, 8, 5, 15])
@pytest.mark.parametrize("threads", [1, 2])
def test_heads_read_and_written_in_place(inside, threads):
    """q, k, v and the output with their heads inside ([B, L, H, D], a linear layer's
    output before the head split) give what torch gives for [B, H, L, D]."""
    q, k, v = inputs(11)
    m = np.random.default_rng(5).random((B, 1, L, S)) > 0.3
    m[..., 0] = True
    expected = nn.functional.scaled_dot_product_attention(
        *map(torch.from_numpy, (q, k, v)), attn_mask=torch.from_numpy(m), scale=0.3)
    out = run(q, k, v, m, 1, 0.3, threads=threads, inside=inside)
    np.testing.assert_allclose(out, expected.numpy(), atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("out_inside", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_heads_sliced_from_fused_projections(out_inside, threads):
    """q, k and v read in place from the outputs of fused projections: q the second H of
    2H heads [B, L, 2H, D] (column H*D), k and v the two halves of one [B, S, 2H, D]."""
    rng = np.random.default_rng(threads)
    qbuf, kv = (rng.standard_normal((B, n, 2 * H, D)).astype(np.float32) for n in (L, S))
    q, k, v = (np.ascontiguousarray(x.swapaxes(1, 2)) for x in
               (qbuf[:, :, H:], kv[:, :, :H], kv[:, :, H:]))
    expected = nn.functional.scaled_dot_product_attention(*map(torch.from_numpy, (q, k, v)),
                                                          scale=0.3)
    out = np.full((B, L, H, D) if out_inside else (B, H, L, D), np.nan, np.float32)
    mode = np.array([1, 0, 0, 0, threads > 1, 7 | 8 * out_inside, H * D, 0, H * D], np.int64)
    attention_post(qbuf, kv, kv, np.zeros((0,) * 4, np.float32), mode,
                   np.array([0.3], np.float32), np.zeros((threads, L, S), np.float32),
                   np.zeros((threads, D, S), np.float32), threads, out)
    np.testing.assert_allclose(out.swapaxes(1, 2) if out_inside else out, expected.numpy(),
                               atol=2e-6, rtol=1e-5)


class Attention(nn.Module):
    """Scores written out (`chain`: "div" by a constant, or "tanh" soft-capping), or SDPA."""

    def __init__(self, chain: str):
        super().__init__()
        self.chain = chain

    def forward(self, q, k, v, mask):
        if self.chain == "sdpa":
            return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        if self.chain == "causal":
            return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        scores = q @ k.transpose(-1, -2)
        scores = scores / 2.0 if self.chain == "div" else torch.tanh(scores / 8) * 8
        return torch.softmax(scores, dim=-1) @ v


@pytest.mark.parametrize("chain", ["sdpa", "causal", "div", "tanh"])
def test_attention_groups_lower_to_the_driver(chain):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
    mask = torch.rand(2, 1, 6, 6) > 0.2
    mask[..., 0] = True
    compiled = cuvil.compile(Attention(chain), (q, k, v, mask))
    library = chain != "tanh"
    assert ("= attention_post  #" in compiled.source) == library
    assert [k.template for k in compiled.report.kernels if k.template == "attention"]
    q, k, v = (torch.randn(3, 4, 6, 8) for _ in range(3))
    mask = torch.rand(3, 1, 6, 6) > 0.2
    mask[..., 0] = True
    torch.testing.assert_close(compiled(q, k, v, mask), Attention(chain)(q, k, v, mask),
                               atol=2e-6, rtol=1e-5)
