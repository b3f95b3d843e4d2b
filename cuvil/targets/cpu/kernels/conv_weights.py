"""A convolution weight that is a run-time value (a training graph's parameter), arranged
at each call for the NCHW drivers, as lowering arranges a constant one once
(`templates.conv`): the direct tile's rows [C*KH*KW, OC] (`conv_direct`), or Winograd's
U = G g G' [4, 4, C, OC], flat, computed in float64 (`winograd`)."""

from __future__ import annotations

import numpy as np

from cuvil.runtime.numba_cache import njit


@njit(nogil=True)
def direct_weight(w):
    """w [OC, C, KH, KW] (contiguous) as [C*KH*KW, OC]."""
    oc = w.shape[0]
    k = w.shape[1] * w.shape[2] * w.shape[3]
    rows = w.reshape(oc, k)
    out = np.empty((k, oc), w.dtype)
    for o in range(oc):
        for r in range(k):
            out[r, o] = rows[o, r]
    return out


@njit(nogil=True)
def winograd_weight_of(w):
    """A 3x3 weight [OC, C, 3, 3] as Winograd's F(2x2, 3x3) U = G g G' [4, 4, C, OC],
    flat (G's rows: (1, 0, 0), (1/2, 1/2, 1/2), (1/2, -1/2, 1/2), (0, 0, 1))."""
    oc, ch = w.shape[0], w.shape[1]
    u = np.empty((4, 4, ch, oc), w.dtype)
    t = np.empty((4, 3))
    for o in range(oc):
        for c in range(ch):
            g = w[o, c]
            for d in range(3):  # t = G g
                g0, g1, g2 = np.float64(g[0, d]), np.float64(g[1, d]), np.float64(g[2, d])
                t[0, d], t[3, d] = g0, g2
                t[1, d], t[2, d] = 0.5 * (g0 + g1 + g2), 0.5 * (g0 - g1 + g2)
            for a in range(4):  # U = t G'
                u[a, 0, c, o] = t[a, 0]
                u[a, 1, c, o] = 0.5 * (t[a, 0] + t[a, 1] + t[a, 2])
                u[a, 2, c, o] = 0.5 * (t[a, 0] - t[a, 1] + t[a, 2])
                u[a, 3, c, o] = t[a, 2]
    return u.reshape(-1)
