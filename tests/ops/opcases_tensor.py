"""Op cases for matrix products, neural-network ops and shape ops: valid random inputs
(derived geometry: conv windows, matmul inner dims, factorizations for reshape), and the
torch expression each op stands for."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from hypothesis import assume
from hypothesis import strategies as st
from opcases_support import (
    BATCH,
    DIM,
    FLOATS,
    NUMERIC,
    Case,
    batch_shape,
    broadcast_partner,
    dim_of,
    pair,
    rand,
)

from cuvil.ir.types import DType


def _float(data):
    return data.draw(st.sampled_from(FLOATS), label="dtype")


# -- matrix products -------------------------------------------------------------------------
def _matmul(data):
    """Matrices or vectors on either side; batch dims that broadcast."""
    dtype, k = _float(data), data.draw(DIM)
    batch = batch_shape(data, 0, 2)
    x_vector, y_vector = data.draw(st.booleans()), data.draw(st.booleans())
    x = (k,) if x_vector else (*batch, data.draw(DIM), k)
    y_batch = batch if x_vector else broadcast_partner(data, batch)
    y = (k,) if y_vector else (*y_batch, k, data.draw(DIM))
    return [rand(data, x, dtype), rand(data, y, dtype)], {}


def _bmm(data):
    dtype, n, m, k, p = _float(data), data.draw(BATCH), *(data.draw(DIM) for _ in range(3))
    return [rand(data, (n, m, k), dtype), rand(data, (n, k, p), dtype)], {}


# -- neural-network ops ----------------------------------------------------------------------
def _conv2d(data):
    g = data.draw(st.integers(1, 2))
    cin, cout = g * data.draw(st.integers(1, 3)), g * data.draw(st.integers(1, 3))
    k, stride, pad, dil = pair(data, 1, 3), pair(data, 1, 2), pair(data, 0, 2), pair(data, 1, 2)
    hw = pair(data, 1, 7)
    for i in (0, 1):
        assume(hw[i] + 2 * pad[i] >= dil[i] * (k[i] - 1) + 1)
    x = rand(data, (data.draw(BATCH), cin, *hw))
    w = rand(data, (cout, cin // g, *k))
    return [x, w], {"stride": stride, "padding": pad, "dilation": dil, "groups": g}


def _batch_norm(data):
    shape = (data.draw(BATCH), *data.draw(st.lists(DIM, min_size=1, max_size=3)))
    c, dtype = shape[1], _float(data)
    params = [rand(data, (c,), dtype) for _ in range(3)]
    var = rand(data, (c,), dtype).abs() + 0.1
    return [rand(data, shape, dtype), *params, var], {"eps": data.draw(st.sampled_from(
        [1e-5, 1e-3]))}


def _layer_norm(data):
    shape, dtype = batch_shape(data, 2, 4), _float(data)
    ns = shape[data.draw(st.integers(1, len(shape) - 1)):]
    return ([rand(data, shape, dtype), rand(data, ns, dtype), rand(data, ns, dtype)],
            {"normalized_shape": ns, "eps": 1e-5})


def _layer_norm_grad(data):
    """dy, x, and the mean and rstd torch's forward saves for x."""
    (x, w, _), attrs = _layer_norm(data)
    ns = attrs["normalized_shape"]
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, list(ns), w, None, 1e-5)
    return [torch.randn_like(x), x, mean, rstd, w], {"normalized_shape": ns}


def _layer_norm_autograd(xs, a):
    """The gradient of `F.layer_norm` at x for dy, by autograd."""
    dy, x, _, _, w = xs
    leaf = x.detach().clone().requires_grad_()
    out = F.layer_norm(leaf, a["normalized_shape"], w, None, 1e-5)
    return torch.autograd.grad(out, leaf, dy)[0]


def _batch_norm_weight_grad(data):
    """dy, x, and the batch mean and 1/std a training batch norm saves for x."""
    x = rand(data, batch_shape(data, 2, 4), _float(data))
    _, mean, invstd = torch.ops.aten._native_batch_norm_legit(x, None, None, True, 0.1, 1e-5)
    return [torch.randn_like(x), x, mean, invstd], {}


def _batch_norm_autograd(xs, a):
    """The gradient of a training `F.batch_norm`'s weight for dy, by autograd."""
    dy, x = xs[:2]
    weight = torch.ones(x.shape[1], dtype=x.dtype, requires_grad=True)
    out = F.batch_norm(x, None, None, weight, None, training=True, eps=1e-5)
    return torch.autograd.grad(out, weight, dy)[0]


def _softmax(data):
    x = rand(data, batch_shape(data, 1, 4), _float(data))
    return [x], {"dim": dim_of(data, x.dim())}


def _window(data, dilation: bool):
    k = pair(data, 1, 3)
    stride = data.draw(st.one_of(st.just(()), st.tuples(st.integers(1, 3), st.integers(1, 3))))
    pad = tuple(data.draw(st.integers(0, ki // 2)) for ki in k)
    dil = pair(data, 1, 2) if dilation else (1, 1)
    hw = pair(data, 1, 8)
    for i in (0, 1):
        assume(hw[i] + 2 * pad[i] >= dil[i] * (k[i] - 1) + 1)
    attrs = {"kernel_size": k, "stride": stride, "padding": pad,
             "ceil_mode": data.draw(st.booleans())}
    if dilation:
        attrs["dilation"] = dil
    return [rand(data, (data.draw(BATCH), data.draw(DIM), *hw))], attrs


def _max_pool(data):
    return _window(data, dilation=True)


def _avg_pool(data):
    xs, attrs = _window(data, dilation=False)
    return xs, {**attrs, "count_include_pad": data.draw(st.booleans())}


def _pool_args(a):
    return {**a, "stride": a["stride"] or None}


def _max_pool_backward(data):
    """A gradient of the pool's output shape, and the pool's own indices."""
    (x,), attrs = _window(data, dilation=True)
    x = x.float()
    y, indices = F.max_pool2d(x, **_pool_args(attrs), return_indices=True)
    # a window with no tap inside the image gets an index past the plane from torch, and
    # torch's backward writes there: no such windows
    assume(not indices.numel() or indices.max().item() < x.shape[2] * x.shape[3])
    return [rand(data, tuple(y.shape)), x, indices], attrs


def _max_pool_gradient(xs, a):
    """The input's gradient by autograd through max_pool2d."""
    x = xs[1].clone().requires_grad_()
    F.max_pool2d(x, **_pool_args(a)).backward(xs[0])
    return x.grad


def _adaptive(data):
    x = rand(data, (data.draw(BATCH), data.draw(DIM), *pair(data, 1, 8)))
    return [x], {"output_size": pair(data, 1, 4)}


def _embedding(data):
    vocab, width = data.draw(DIM), data.draw(DIM)
    idx_shape = batch_shape(data, 1, 3)
    idx = torch.randint(0, vocab, idx_shape, generator=torch.Generator().manual_seed(
        data.draw(st.integers(0, 999))), dtype=data.draw(st.sampled_from([torch.int32,
                                                                            torch.int64])))
    return [rand(data, (vocab, width)), idx], {}


def _attention(data):
    n, h, seq_q, seq_k, e, ev = data.draw(BATCH), *(data.draw(DIM) for _ in range(5))
    dtype = _float(data)
    q, k, v = (rand(data, s, dtype) for s in ((n, h, seq_q, e), (n, h, seq_k, e),
                                              (n, h, seq_k, ev)))
    kind = data.draw(st.sampled_from(["none", "causal", "float", "bool"]))
    mask = []
    if kind == "float":
        mask = [rand(data, (seq_q, seq_k), dtype)]
    elif kind == "bool":
        mask = [torch.ones(seq_q, seq_k, dtype=torch.bool).tril()]
    scale = data.draw(st.one_of(st.none(), st.floats(0.1, 2)))
    return [q, k, v, *mask], {"is_causal": kind == "causal", "scale": scale}


def _torch_attention(xs, a):
    q, k, v = xs[:3]
    scale = a["scale"] if a["scale"] is not None else 1 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1) * scale
    if a["is_causal"]:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if len(xs) == 4:
        mask = xs[3]
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else (
            scores + mask)
    return torch.softmax(scores, -1) @ v


# -- shape ops -------------------------------------------------------------------------------
def _factors(data, total: int) -> tuple[int, ...]:
    """A random factorization of `total` into 1..3 factors."""
    out = []
    while total > 1 and len(out) < 2:
        divisors = [d for d in range(1, total + 1) if total % d == 0]
        d = data.draw(st.sampled_from(divisors))
        out.append(d)
        total //= d
    return (*out, total)


def _reshape(data):
    shape = batch_shape(data, 1, 4)
    rest = _factors(data, math.prod(shape[1:]))
    target = [shape[0], *rest]
    if data.draw(st.booleans()):
        target[data.draw(st.integers(0, len(target) - 1))] = -1
    return [rand(data, shape)], {"shape": tuple(target)}


def _flip(data):
    shape = batch_shape(data, 1, 4)
    dims = data.draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1,
                              max_size=len(shape), unique_by=lambda d: d % len(shape)))
    return [rand(data, shape)], {"dims": tuple(dims)}


def _reversed(x, dims):
    """x with the order along each of dims reversed, by index_select."""
    for d in dims:
        x = x.index_select(d, torch.arange(x.shape[d] - 1, -1, -1))
    return x


def _permute(data):
    shape = batch_shape(data, 1, 4)
    dims = data.draw(st.permutations(range(len(shape))))
    return [rand(data, shape)], {"dims": tuple(d - len(shape) if data.draw(st.booleans())
                                               else d for d in dims)}


def _transpose(data):
    x = rand(data, batch_shape(data, 1, 4))
    return [x], {"dim0": dim_of(data, x.dim()), "dim1": dim_of(data, x.dim())}


def _flatten(data):
    x = rand(data, batch_shape(data, 0, 4))
    if x.dim() == 0:
        return [x], {"start_dim": 0, "end_dim": -1}
    a, b = sorted((data.draw(st.integers(0, x.dim() - 1)), data.draw(st.integers(0,
                                                                                 x.dim() - 1))))
    return [x], {"start_dim": a, "end_dim": b - x.dim() if data.draw(st.booleans()) else b}


def _unsqueeze(data):
    x = rand(data, batch_shape(data, 0, 3))
    return [x], {"dim": data.draw(st.integers(-x.dim() - 1, x.dim()))}


def _squeeze(data):
    shape = batch_shape(data, 1, 4)
    shape = tuple(1 if i and data.draw(st.booleans()) else d for i, d in enumerate(shape))
    dims = data.draw(st.sets(st.integers(0, len(shape) - 1), max_size=len(shape)))
    return [rand(data, shape)], {"dim": tuple(sorted(dims))}


def _expand(data):
    shape = tuple(1 if data.draw(st.booleans()) else d for d in batch_shape(data, 1, 3))
    target = [data.draw(st.sampled_from([d, -1])) if d != 1 else data.draw(
        st.sampled_from([1, -1, data.draw(BATCH)])) for d in shape]
    lead = data.draw(st.lists(DIM, max_size=1))
    return [rand(data, shape)], {"shape": (*lead, *target)}


def _cat(data):
    base = batch_shape(data, 1, 4)
    d = dim_of(data, len(base))
    pieces = []
    for _ in range(data.draw(st.integers(1, 3))):
        shape = list(base)
        shape[d] = data.draw(DIM) if d % len(base) else shape[d]
        pieces.append(rand(data, shape, torch.float32))
    return pieces, {"dim": d}


def _slice(data):
    x = rand(data, batch_shape(data, 1, 4))
    d = dim_of(data, x.dim())
    size = x.shape[d]
    if d % x.dim():
        start = data.draw(st.integers(-size - 1, size + 2))
        end = data.draw(st.one_of(st.none(), st.integers(-size - 1, size + 2)))
    else:  # the batch dim may be symbolic: bounds from 0, never an empty slice
        start = data.draw(st.integers(0, size - 1))
        end = data.draw(st.one_of(st.none(), st.integers(start + 1, size + 2)))
    return [x], {"dim": d, "start": start, "end": end, "step": data.draw(st.integers(1, 3))}


def _torch_slice(xs, a):
    index = [slice(None)] * xs[0].dim()
    index[a["dim"]] = slice(a["start"], a["end"], a["step"])
    return xs[0][tuple(index)]


def _select(data):
    x = rand(data, batch_shape(data, 1, 4), data.draw(st.sampled_from(NUMERIC)))
    d = dim_of(data, x.dim())
    return [x], {"dim": d, "index": data.draw(st.integers(-x.shape[d], x.shape[d] - 1))}


def _arange(data):
    dtype = data.draw(st.sampled_from(["f32", "f64", "i32", "i64"]), label="dtype")
    return [], {"shape": (data.draw(st.one_of(BATCH, DIM)),), "dtype": dtype,
                "start": data.draw(st.integers(-5, 5)), "step": data.draw(st.integers(1, 3))}


def _torch_arange(xs, a):
    n, start, step = a["shape"][0], a["start"], a["step"]
    return torch.arange(start, start + n * step, step, dtype=DType(a["dtype"]).torch)


CASES: dict[str, Case] = {
    "arange": Case(_arange, _torch_arange, ("shape",)),
    "matmul": Case(_matmul, lambda xs, a: xs[0] @ xs[1], tol=1e-5),
    "bmm": Case(_bmm, lambda xs, a: torch.einsum("nmk,nkp->nmp", *xs), tol=1e-5),
    "conv2d": Case(_conv2d, lambda xs, a: F.conv2d(xs[0], xs[1], None, **a), tol=1e-5),
    "batch_norm": Case(_batch_norm, lambda xs, a: F.batch_norm(
        xs[0], xs[3], xs[4], xs[1], xs[2], training=False, eps=a["eps"]), tol=1e-5),
    "layer_norm": Case(_layer_norm, lambda xs, a: F.layer_norm(
        xs[0], a["normalized_shape"], xs[1], xs[2], a["eps"]), shape_attrs=(
            "normalized_shape",), tol=1e-5),
    "layer_norm_rstd": Case(lambda data: (lambda xs, a: ([xs[0]], a))(*_layer_norm(data)),
                            lambda xs, a: 1 / torch.sqrt(xs[0].var(
                                tuple(range(-len(a["normalized_shape"]), 0)), correction=0,
                                keepdim=True) + a["eps"]), shape_attrs=("normalized_shape",),
                            tol=1e-5),
    "layer_norm_grad": Case(_layer_norm_grad, _layer_norm_autograd,
                            shape_attrs=("normalized_shape",), tol=1e-4),
    "batch_norm_weight_grad": Case(_batch_norm_weight_grad, _batch_norm_autograd, tol=1e-4),
    "softmax": Case(_softmax, lambda xs, a: F.softmax(xs[0], a["dim"])),
    "log_softmax": Case(_softmax, lambda xs, a: F.log_softmax(xs[0], a["dim"]), tol=1e-5),
    "max_pool2d": Case(_max_pool, lambda xs, a: F.max_pool2d(xs[0], **_pool_args(a))),
    "max_pool2d_indices": Case(_max_pool, lambda xs, a: F.max_pool2d(
        xs[0].float(), **_pool_args(a), return_indices=True)[1]),
    "max_pool2d_backward": Case(_max_pool_backward, _max_pool_gradient),
    "avg_pool2d": Case(_avg_pool, lambda xs, a: F.avg_pool2d(xs[0], **_pool_args(a))),
    "adaptive_avg_pool2d": Case(_adaptive, lambda xs, a: F.adaptive_avg_pool2d(
        xs[0], a["output_size"])),
    "embedding": Case(_embedding, lambda xs, a: xs[0][xs[1].long()]),
    "scaled_dot_product_attention": Case(_attention, _torch_attention, tol=1e-5),
    "reshape": Case(_reshape, lambda xs, a: xs[0].reshape(a["shape"]), ("shape",)),
    "view": Case(_reshape, lambda xs, a: xs[0].view(a["shape"]), ("shape",)),
    "permute": Case(_permute, lambda xs, a: xs[0].permute(a["dims"])),
    "flip": Case(_flip, lambda xs, a: _reversed(xs[0], a["dims"])),
    "transpose": Case(_transpose, lambda xs, a: xs[0].transpose(a["dim0"], a["dim1"])),
    "flatten": Case(_flatten, lambda xs, a: torch.flatten(xs[0], a["start_dim"], a["end_dim"])),
    "unsqueeze": Case(_unsqueeze, lambda xs, a: xs[0].unsqueeze(a["dim"])),
    "squeeze": Case(_squeeze, lambda xs, a: xs[0].squeeze(a["dim"]) if a["dim"]
                    else xs[0].squeeze()),
    "expand": Case(_expand, lambda xs, a: xs[0].expand(a["shape"]), ("shape",)),
    "cat": Case(_cat, lambda xs, a: torch.cat(xs, a["dim"])),
    "slice": Case(_slice, _torch_slice),
    "select": Case(_select, lambda xs, a: xs[0][(slice(None),) * (a["dim"] % xs[0].dim())
                                                 + (a["index"],)]),
}
