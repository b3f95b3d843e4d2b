"""Op cases for scans and advanced indexing: `cumsum`, `diff`, `index` (index tensors that
broadcast together, negative ones included) and `gather`, against the torch expressions
they stand for."""

from __future__ import annotations

import torch
from hypothesis import strategies as st
from opcases_support import (
    NUMERIC,
    Case,
    batch_shape,
    broadcast_partner,
    dim_of,
    rand,
)

ALL = [*NUMERIC, torch.bool]


def _scan(data):
    x = rand(data, batch_shape(data, 1, 4), data.draw(st.sampled_from(ALL), label="dtype"))
    return [x], {"dim": dim_of(data, x.dim())}


def _index(data):
    x = rand(data, batch_shape(data, 1, 4), data.draw(st.sampled_from(ALL)))
    k = data.draw(st.integers(1, x.dim()), label="indexed dims")
    start = data.draw(st.integers(0, x.dim() - k), label="start")
    base = batch_shape(data, 0, 3)
    dtype = data.draw(st.sampled_from([torch.int32, torch.int64]), label="index dtype")
    idx = []
    for j in range(k):
        size = x.shape[start + j]
        shape = base if j == 0 else broadcast_partner(data, base)
        seed = data.draw(st.integers(0, 2**31 - 1), label="seed")
        g = torch.Generator().manual_seed(seed)
        idx.append(torch.randint(-size, size, shape, generator=g).to(dtype))
    return [x, *idx], {"start": start}


def _gather(data):
    x = rand(data, batch_shape(data, 1, 4), data.draw(st.sampled_from(ALL), label="dtype"))
    d = dim_of(data, x.dim())
    shape = tuple(data.draw(st.integers(1, 5)) if k == d % x.dim() else
                  data.draw(st.integers(1, n)) for k, n in enumerate(x.shape))
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1), label="seed"))
    return [x, torch.randint(0, x.shape[d], shape, generator=g)], {"dim": d}


CASES: dict[str, Case] = {
    "gather": Case(_gather, lambda xs, a: torch.gather(xs[0], a["dim"], xs[1])),
    "cumsum": Case(_scan, lambda xs, a: torch.cumsum(xs[0], a["dim"]), tol=1e-5),
    "diff": Case(_scan, lambda xs, a: torch.diff(xs[0], dim=a["dim"])),
    "index": Case(_index, lambda xs, a: xs[0][(slice(None),) * a["start"] + tuple(xs[1:])]),
}
