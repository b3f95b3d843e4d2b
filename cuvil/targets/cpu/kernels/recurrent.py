"""LSTM and GRU layers as calls compiled once per installation (`lstm_layer_run`,
`gru_layer_run`): a `recurrent` group is one of them, so lowering generates nothing.

Each runs one direction of one layer (`ops/recurrent.py` gives the semantics and the
output's form: the final state(s), then every step's hidden state). The input projection
of all time steps is one product, `x [T*B, I] @ w_ih^T`; the loop over time then multiplies
the hidden state by `w_hh^T` into a [B, gates * H] buffer and computes the gates in place,
writing each step's hidden state straight into the output. The gates' sigmoid and tanh
are `vmath`'s, which vectorize over the hidden units (in f32 for an f32 layer; the C
library's one element at a time took most of a batch-8 LSTM's time).
"""

from __future__ import annotations

import numpy as np

from cuvil.runtime.numba_cache import njit
from cuvil.targets.cpu.kernels.vmath import vsigmoid, vtanh

_OPTS = dict(nogil=True, error_model="numpy",
             fastmath={"nsz", "arcp", "contract", "afn", "reassoc"})  # no nnan: NaN as torch


@njit(**_OPTS)
def _projection(x, w_ih, b_ih):
    """x [T, B, I] @ w_ih^T + b_ih, as [T * B, gates * H]."""
    t, b, i = x.shape
    gx = np.dot(np.ascontiguousarray(x).reshape((t * b, i)), np.ascontiguousarray(w_ih).T)
    for r in range(gx.shape[0]):
        for j in range(gx.shape[1]):
            gx[r, j] += b_ih[j]
    return gx


@njit(**_OPTS)
def _lstm_steps(gx, whT, b_hh, h, c, rev, out):
    steps, batch, hidden = out.shape[0] - 2, h.shape[0], h.shape[1]
    gh = np.empty((batch, 4 * hidden), h.dtype)
    for s in range(steps):
        t = steps - 1 - s if rev else s
        np.dot(h, whT, gh)
        for n in range(batch):
            g, q = gx[t * batch + n], gh[n]
            for j in range(hidden):
                i = vsigmoid(g[j] + q[j] + b_hh[j])
                f = vsigmoid(g[hidden + j] + q[hidden + j] + b_hh[hidden + j])
                u = vtanh(g[2 * hidden + j] + q[2 * hidden + j] + b_hh[2 * hidden + j])
                o = vsigmoid(g[3 * hidden + j] + q[3 * hidden + j] + b_hh[3 * hidden + j])
                c[n, j] = f * c[n, j] + i * u
                h[n, j] = o * vtanh(c[n, j])
                out[2 + t, n, j] = h[n, j]


@njit(**_OPTS)
def lstm_layer_run(x, h0, c0, w_ih, w_hh, b_ih, b_hh, rev, out):
    """out = lstm_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse=rev[0] != 0)."""
    gx = _projection(x, w_ih, b_ih)
    h, c = h0.copy(), c0.copy()
    _lstm_steps(gx, np.ascontiguousarray(w_hh.T), b_hh, h, c, rev[0] != 0, out)
    out[0] = h
    out[1] = c


@njit(**_OPTS)
def _gru_steps(gx, whT, b_hh, h, rev, out):
    steps, batch, hidden = out.shape[0] - 1, h.shape[0], h.shape[1]
    gh = np.empty((batch, 3 * hidden), h.dtype)
    for s in range(steps):
        t = steps - 1 - s if rev else s
        np.dot(h, whT, gh)
        for n in range(batch):
            g, q = gx[t * batch + n], gh[n]
            for j in range(hidden):
                r = vsigmoid(g[j] + q[j] + b_hh[j])
                z = vsigmoid(g[hidden + j] + q[hidden + j] + b_hh[hidden + j])
                u = vtanh(g[2 * hidden + j] + r * (q[2 * hidden + j] + b_hh[2 * hidden + j]))
                h[n, j] = (1 - z) * u + z * h[n, j]
                out[1 + t, n, j] = h[n, j]


@njit(**_OPTS)
def gru_layer_run(x, h0, w_ih, w_hh, b_ih, b_hh, rev, out):
    """out = gru_layer(x, h0, w_ih, w_hh, b_ih, b_hh, reverse=rev[0] != 0)."""
    gx = _projection(x, w_ih, b_ih)
    h = h0.copy()
    _gru_steps(gx, np.ascontiguousarray(w_hh.T), b_hh, h, rev[0] != 0, out)
    out[0] = h
