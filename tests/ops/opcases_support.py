"""What every op case is made of: random shapes and tensors drawn by hypothesis, and the
`Case` record (how to draw valid inputs and attributes, and the torch expression the op
stands for).

The batch size `N` is 11 or 13 and no other dim takes those values (other dims are at most
8, and products of dims 1..5 have no prime factor above 5), so the symbolic test can
replace every occurrence of N by a symbol without ambiguity.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import assume
from hypothesis import strategies as st

BATCH = st.sampled_from([11, 13])
DIM = st.integers(1, 5)
FLOATS = [torch.float32, torch.float64]
INTS = [torch.int32, torch.int64]
NUMERIC = FLOATS + INTS

Draw = Callable[[st.DataObject], tuple[list[torch.Tensor], dict[str, Any]]]
Expect = Callable[[list[torch.Tensor], dict[str, Any]], torch.Tensor]


@dataclass(frozen=True)
class Case:
    """`draw(data)` -> (inputs, attrs) valid for the op; `expect(inputs, attrs)` is the
    plain torch computation the op stands for."""

    draw: Draw
    expect: Expect
    shape_attrs: tuple[str, ...] = ()  # attrs holding dims that may be symbolic
    tol: float = 1e-6


def rand(data: st.DataObject, shape, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1), label="seed"))
    shape = tuple(shape)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    low = 0 if dtype == torch.uint8 else -5
    return torch.randint(low, 6, shape, generator=g).to(dtype)


def batch_shape(data: st.DataObject, min_rank: int = 1, max_rank: int = 4) -> tuple[int, ...]:
    """A shape whose dim 0 (if any) is the batch size N."""
    rank = data.draw(st.integers(min_rank, max_rank), label="rank")
    if rank == 0:
        return ()
    return (data.draw(BATCH, label="N"), *data.draw(st.lists(DIM, min_size=rank - 1,
                                                             max_size=rank - 1)))


def broadcast_partner(data: st.DataObject, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts with `shape`: a suffix of it with some dims set to 1."""
    k = data.draw(st.integers(0, len(shape)), label="partner rank")
    suffix = shape[len(shape) - k:]
    return tuple(1 if data.draw(st.booleans()) else d for d in suffix)


def broadcast_tensors(data: st.DataObject, dtypes: list[list[torch.dtype]]) -> list:
    """Tensors that broadcast together, the i-th of a dtype drawn from `dtypes[i]`."""
    base = batch_shape(data, 0, 4)
    shapes = [base] + [broadcast_partner(data, base) for _ in dtypes[1:]]
    order = data.draw(st.permutations(range(len(dtypes))), label="order")
    return [rand(data, shapes[o], data.draw(st.sampled_from(choices)))
            for o, choices in zip(order, dtypes, strict=True)]


def dim_of(data: st.DataObject, rank: int) -> int:
    """A valid dim index for `rank`, possibly negative."""
    assume(rank > 0)
    return data.draw(st.integers(-rank, rank - 1), label="dim")


def dims_of(data: st.DataObject, rank: int) -> tuple[int, ...]:
    """A set of distinct dims (possibly empty, meaning all), some negative."""
    chosen = data.draw(st.sets(st.integers(0, max(rank - 1, 0)), max_size=rank), label="dims")
    return tuple(d - rank if data.draw(st.booleans()) else d for d in sorted(chosen))


def pair(data: st.DataObject, low: int, high: int) -> tuple[int, int]:
    return (data.draw(st.integers(low, high)), data.draw(st.integers(low, high)))
