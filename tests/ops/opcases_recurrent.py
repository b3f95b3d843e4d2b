"""Property cases of the recurrent ops (`lstm_layer`, `gru_layer`): random sequences,
states and weights, against the LSTM and GRU cells written out step by step in torch."""

from __future__ import annotations

import torch
from hypothesis import strategies as st
from opcases_support import BATCH, DIM, FLOATS, Case, rand


def _draw(gates: int, states: int):
    def draw(data):
        dtype = data.draw(st.sampled_from(FLOATS), label="dtype")
        t, n, i, h = (data.draw(DIM), data.draw(BATCH), data.draw(DIM), data.draw(DIM))
        xs = [rand(data, (t, n, i), dtype), *(rand(data, (n, h), dtype) for _ in range(states)),
              rand(data, (gates * h, i), dtype), rand(data, (gates * h, h), dtype),
              rand(data, (gates * h,), dtype), rand(data, (gates * h,), dtype)]
        return xs, {"reverse": data.draw(st.booleans(), label="reverse")}

    return draw


def _steps(x: torch.Tensor, reverse: bool) -> list[int]:
    order = list(range(x.shape[0]))
    return order[::-1] if reverse else order


def _lstm(xs, a):
    x, h, c, w_ih, w_hh, b_ih, b_hh = xs
    seq = [None] * x.shape[0]
    for t in _steps(x, a["reverse"]):
        i, f, g, o = (x[t] @ w_ih.T + b_ih + h @ w_hh.T + b_hh).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = seq[t] = torch.sigmoid(o) * torch.tanh(c)
    return torch.stack([h, c, *seq])


def _gru(xs, a):
    x, h, w_ih, w_hh, b_ih, b_hh = xs
    seq = [None] * x.shape[0]
    for t in _steps(x, a["reverse"]):
        xr, xz, xn = (x[t] @ w_ih.T + b_ih).chunk(3, dim=1)
        hr, hz, hn = (h @ w_hh.T + b_hh).chunk(3, dim=1)
        r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
        h = seq[t] = (1 - z) * torch.tanh(xn + r * hn) + z * h
    return torch.stack([h, *seq])


CASES = {"lstm_layer": Case(_draw(4, 2), _lstm, tol=1e-5),
         "gru_layer": Case(_draw(3, 1), _gru, tol=1e-5)}
