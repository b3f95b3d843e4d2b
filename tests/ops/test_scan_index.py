"""`cumsum`, `diff` and `index` (advanced indexing) compile to native kernels, with no
torch fallback, and match torch eager over symbolic batch and length dims, for float,
integer and bool inputs; index tensors on dims apart (no catalog form) still run through
torch and match."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.export import Dim

import cuvil

DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64, torch.bool]
SHAPES = [(2, 7), (1, 4), (5, 12)]


def values(shape, dtype):
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=dtype)
    return torch.randint(0, 3, shape).to(dtype)


def compiled(model, x):
    spec = ({0: Dim("batch"), 1: Dim("seq", min=4)},)  # torch's diff guards seq - n != 1
    return cuvil.compile(model, (x,), dynamic_shapes=spec)


def ops_left(fast) -> set[str]:
    return {f.op for f in fast.report.fallbacks}


def check(model, dtype, shapes=SHAPES):
    torch.manual_seed(0)
    fast = compiled(model, values(shapes[0], dtype))
    assert ops_left(fast) == set()
    for shape in shapes:
        x = values(shape, dtype)
        torch.testing.assert_close(fast(x), model(x), rtol=1e-6, atol=1e-5)


class Cumsum(nn.Module):
    def __init__(self, dim, dtype=None):
        super().__init__()
        self.dim, self.dtype = dim, dtype

    def forward(self, x):
        return torch.cumsum(x, self.dim, dtype=self.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, -1])
def test_cumsum_matches_eager(dtype, dim):
    check(Cumsum(dim), dtype)


def test_cumsum_with_a_dtype_casts_first():
    check(Cumsum(1, torch.float64), torch.int32)
    check(Cumsum(1, torch.int32), torch.float32)


class Diff(nn.Module):
    def __init__(self, n=1, ends=False):
        super().__init__()
        self.n, self.ends = n, ends

    def forward(self, x):
        if not self.ends:
            return torch.diff(x, n=self.n, dim=-1)
        return torch.diff(x, n=self.n, dim=1, prepend=x[:, :1], append=x[:, :1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n, ends", [(1, False), (2, False), (1, True), (2, True)])
def test_diff_matches_eager(dtype, n, ends):
    check(Diff(n, ends), dtype, [(2, 7), (1, 4), (5, 12)])


class Packed(nn.Module):
    """transformers' packed-sequence mask: positions' breaks, counted, then compared at
    every (batch, query, key) through index tensors."""

    def forward(self, x):
        b, s = x.shape
        pos = torch.cumsum(x, -1)
        breaks = (torch.diff(pos, prepend=pos[:, :1] - 1, dim=-1) != 1).cumsum(-1)
        bi = torch.arange(b)[:, None, None, None]
        q = torch.arange(s)[None, None, :, None]
        k = torch.arange(s)[None, None, None, :]
        return breaks[bi, q] == breaks[bi, k]


def test_packed_sequence_mask_is_native():
    check(Packed(), torch.int64)


class Index(nn.Module):
    def __init__(self, key):
        super().__init__()
        self.key = key

    def forward(self, x):
        b, s = x.shape[:2]
        rows = torch.arange(b - 1, -1, -1)  # reversed: a symbolic start, in torch
        cols = torch.arange(s) - 2  # negative indices wrap
        keys = {"rows": (rows,), "cols": (slice(None), cols),
                "both": (rows[:, None], cols[None, :]), "grid": (rows[:, None, None], cols)}
        return x[keys[self.key]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
@pytest.mark.parametrize("key", ["cols", "both", "grid"])
def test_index_matches_eager(dtype, key):
    torch.manual_seed(0)
    model = Index(key)
    x = values((3, 6, 4), dtype)
    spec = ({0: Dim("batch"), 1: Dim("seq")},)
    fast = cuvil.compile(model, (x,), dynamic_shapes=spec)
    assert ops_left(fast) <= {"torch_op aten.arange.start_step"}  # the reversed rows
    for shape in ((3, 6, 4), (1, 2, 4), (4, 9, 4)):
        x = values(shape, dtype)
        torch.testing.assert_close(fast(x), model(x))


class Apart(nn.Module):
    """Index tensors on dims 0 and 2: torch puts their shape first, no catalog form."""

    def forward(self, x):
        i = torch.tensor([[0, 1], [1, 0]])
        return x[i, :, i]


def test_index_tensors_on_dims_apart_still_run_in_torch():
    x = torch.randn(3, 4, 5)
    fast = cuvil.compile(Apart(), (x,))
    assert ops_left(fast) == {"torch_op aten.index.Tensor"}
    torch.testing.assert_close(fast(x), Apart()(x))


class Fixed(nn.Module):
    def forward(self, x):
        return x[:, torch.tensor([0, 5])]


def test_an_index_out_of_range_raises_as_torch_does():
    model = Fixed()
    fast = compiled(model, torch.randn(2, 6))
    assert ops_left(fast) == set()
    assert fast(torch.randn(3, 8)).shape == (3, 2)
    for run in (model, fast):
        with pytest.raises(IndexError):
            run(torch.randn(2, 4))


class Gather(nn.Module):
    """BERT's token type ids: a fixed buffer, positions cut to the length, then gathered."""

    def __init__(self, dtype):
        super().__init__()
        self.register_buffer("ids", values((1, 32), dtype))
        self.register_buffer("positions", torch.arange(32).flip(0)[None])

    def forward(self, x):
        b, s = x.shape
        pos = self.positions[:, :s]  # a symbolic end on a static dim
        picked = torch.gather(self.ids.expand(pos.shape[0], -1), dim=1, index=pos)
        order = self.positions.flip(1)[:, :s].expand(b, s)  # 0, 1, ... s - 1
        return picked.expand(b, s), torch.gather(x, 1, order), torch.gather(
            x, 0, torch.zeros_like(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_gather_and_a_buffer_cut_to_the_length_match_eager(dtype):
    model = Gather(dtype)
    fast = compiled(model, values((2, 7), torch.int64))
    assert ops_left(fast) == set()
    assert {"gather", "index", "arange"} <= {n.op for n in fast.graph}
    for shape in ((2, 7), (1, 4), (5, 12)):
        x = values(shape, torch.int64)
        for got, want in zip(fast(x), model(x), strict=True):
            torch.testing.assert_close(got, want)


def test_a_gather_index_out_of_range_raises_as_torch_does():
    class Far(nn.Module):
        def forward(self, x):
            return torch.gather(x, 1, x.long())

    fast = cuvil.compile(Far(), (torch.zeros(2, 3),))
    assert ops_left(fast) == set()
    x = torch.full((2, 3), 5.0)
    for run in (Far(), fast):
        with pytest.raises((IndexError, RuntimeError)):
            run(x)
