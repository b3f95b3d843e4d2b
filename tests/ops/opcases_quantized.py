"""Op cases for the integer ops of quantization, each against an independent computation:
torch's own per-channel quantizer for `qweight`, int64 products for `matmul_i8`, and
im2col with int64 products for `conv2d_i8`."""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from hypothesis import strategies as st
from opcases_support import BATCH, DIM, Case, rand
from opcases_tensor import pair


def _weight(data):
    rank = data.draw(st.sampled_from([2, 4]), label="weight rank")
    shape = tuple(data.draw(DIM) for _ in range(rank))
    axis = data.draw(st.sampled_from([0, -1] if rank == 2 else [0]), label="axis")
    return [rand(data, shape)], {"axis": axis}


def _scales(w: torch.Tensor, axis: int) -> torch.Tensor:
    moved = w.movedim(axis, 0).reshape(w.shape[axis], -1)
    absmax = moved.abs().amax(dim=1)
    return torch.where(absmax > 0, absmax / 127, torch.ones_like(absmax))


def _torch_qweight(xs, a):
    w, axis = xs[0], a["axis"] % xs[0].dim()
    s = _scales(w, axis)
    with warnings.catch_warnings():  # torch's quantized tensors are deprecated, still exact
        warnings.simplefilter("ignore", UserWarning)
        q = torch.quantize_per_channel(w, s.double(), torch.zeros_like(s, dtype=torch.long),
                                       axis, torch.qint8)
    return q.int_repr()


def _scale_shape(xs, a):
    w, axis = xs[0], a["axis"] % xs[0].dim()
    s = _scales(w, axis)
    return s if axis == w.dim() - 1 else s.reshape(-1, *([1] * (w.dim() - 2)))


def _ints(data, shape, dtype):
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1), label="seed"))
    lo, hi = (0, 256) if dtype == torch.uint8 else (-128, 128)
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def _matmul_i8(data):
    x_dtype = data.draw(st.sampled_from([torch.uint8, torch.int8]))
    k, n = data.draw(DIM), data.draw(DIM)
    lead = (data.draw(BATCH),) + tuple(data.draw(st.lists(DIM, max_size=1)))
    zero = data.draw(st.integers(0, 255) if x_dtype == torch.uint8 else st.integers(-128, 127))
    return [_ints(data, (*lead, k), x_dtype), _ints(data, (k, n), torch.int8)], {
        "x_zero": zero}


def _conv2d_i8(data):
    cin, cout = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    k, stride, pad = pair(data, 1, 3), pair(data, 1, 2), pair(data, 0, 1)
    hw = tuple(max(a, b) for a, b in zip(pair(data, 1, 6), k, strict=True))
    x = _ints(data, (data.draw(BATCH), cin, *hw), torch.uint8)
    w = _ints(data, (cout, cin, *k), torch.int8)
    return [x, w], {"stride": stride, "padding": pad, "dilation": (1, 1), "groups": 1,
                    "x_zero": data.draw(st.integers(0, 255))}


def _im2col(xs, a):
    x, w = xs
    cols = F.unfold(x.double() - a["x_zero"], w.shape[2:], padding=a["padding"],
                    stride=a["stride"]).long()
    out = w.long().reshape(w.shape[0], -1) @ cols
    oh = (x.shape[2] + 2 * a["padding"][0] - w.shape[2]) // a["stride"][0] + 1
    return out.reshape(x.shape[0], w.shape[0], oh, -1).int()


CASES = {
    "qweight": Case(_weight, _torch_qweight),
    "qweight_scale": Case(_weight, _scale_shape),
    "matmul_i8": Case(_matmul_i8, lambda xs, a: ((xs[0].long() - a["x_zero"])
                                                  @ xs[1].long()).int()),
    "conv2d_i8": Case(_conv2d_i8, _im2col),
}
