"""How `rules verify` draws an op's inputs: valid shapes by construction, for a wanted output.

Random shapes rarely fit (matmul's inner dims, conv geometry, reshape sizes), so the
instance builder asks the op's *generator* (`OpDef.shapes`, defined in this package's
modules beside the other ops' generators) for its inputs. A generator is a Python
generator function `gen(ctx, want, attrs, args)`: it fixes the op's free attributes through
`attrs.get(name, choose)`, then yields a `Want` for each tensor input in order and receives
the type that was built for it, so a later input can follow an earlier one (matmul's `w`
takes the inner dim of the `x` actually built). The catalog's `infer` then checks the
result; a generator only has to be right most of the time.

`ctx` is the builder (`cuvil/verify/instances.py`): `ctx.rng`, `ctx.dim()`,
`ctx.rank()`, `ctx.fill(shape, rank)`, `ctx.known(term)` (the type of an input already
fixed: a bound variable or a scalar) and `ctx.rank_hint(term)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from cuvil.ir.types import DType, TensorType

# value domains of a tensor leaf (how `instances` draws its values)
POSITIVE = "positive"  # always > 0 (a variance)
MOSTLY_POSITIVE = "mostly_positive"  # > 0 in most instances (log, sqrt): NaNs stay tested


class Invalid(Exception):
    """This attempt cannot give a valid instance (the builder starts another)."""


@dataclass(frozen=True)
class Want:
    """What a parent needs of an input: any field left `None` is free; a dim may be None."""

    shape: tuple[int | None, ...] | None = None
    dtype: DType | None = None
    layout: str | None = None
    device: str | None = None
    domain: Any = None  # POSITIVE, MOSTLY_POSITIVE, ("below", n) for indices
    loose: bool = False  # a broadcast operand: any shape that broadcasts to `shape` will do

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    def with_(self, **changes) -> Want:
        return replace(self, **changes)


FREE = Want()


def fits(t: TensorType, want: Want) -> bool:
    """Whether the built type `t` is what `want` asks for."""
    if want.shape is not None:
        if len(want.shape) != t.rank and not (want.loose and t.rank < len(want.shape)):
            return False
        tail = want.shape[len(want.shape) - t.rank:]
        if any(w is not None and w != d and not (want.loose and d == 1)
               for w, d in zip(tail, t.shape, strict=True)):
            return False
    return all(w is None or w == v for w, v in ((want.dtype, t.dtype), (want.layout, t.layout),
                                               (want.device, t.device)))


def same_shape(want: Want, shape: tuple[int, ...] | None, **changes) -> Want:
    """`want` for an input of the given (or the wanted) shape; other fields kept."""
    return want.with_(shape=shape if shape is not None else want.shape, **changes)


def variant(shape: tuple[int, ...], rank: int, rng) -> tuple[int, ...]:
    """A random operand of `rank` that broadcasts to `shape` (its tail, some dims 1)."""
    if rank > len(shape):
        raise Invalid("an operand of higher rank than the result")
    return tuple(d if rng.random() < 0.7 else 1 for d in shape[len(shape) - rank:])


def cover(shape: tuple[int, ...], fixed: dict[int, tuple[int, ...]], ranks: dict[int, int],
          rng) -> dict[int, tuple[int, ...]]:
    """Broadcast operands of `shape`: one per key of `ranks` (its rank), that together with
    the `fixed` ones broadcast to exactly `shape` (every dim other than 1 is somebody's)."""
    r = len(shape)
    out = {i: variant(shape, k, rng) for i, k in ranks.items()}
    for j, d in enumerate(shape):
        if d == 1 or any(_has(s, r, j, d) for s in [*fixed.values(), *out.values()]):
            continue
        reach = [i for i, s in out.items() if len(s) >= r - j]
        if not reach:
            if not out:
                raise Invalid(f"dim {j} of {shape} is not covered")
            reach = [max(out, key=lambda i: len(out[i]))]
        i = rng.choice(reach)
        s = (1,) * (r - len(out[i])) + out[i]
        out[i] = s[:j] + (d,) + s[j + 1:]
    return out


def _has(s: tuple[int, ...], r: int, j: int, d: int) -> bool:
    k = j - (r - len(s))
    return k >= 0 and s[k] == d


def factorize(n: int, parts: int, rng) -> tuple[int, ...]:
    """A random way to write `n` as a product of `parts` positive factors."""
    out = [1] * parts
    p = 2
    while n > 1:
        while n % p == 0:
            out[rng.randrange(parts)] *= p
            n //= p
        p += 1 if p == 2 else 2
    return tuple(out)


Generator = Callable[..., Iterator[Want]]  # (ctx, want, attrs, args) -> Wants


def generic(ctx, want: Want, attrs, args) -> Iterator[Want]:
    """Ops without a generator: one input passes the wanted type through (a float one for a
    float-only op), several are free."""
    if len(args) == 1 and attrs.opdef.float_only and want.dtype is None:
        want = want.with_(dtype=ctx.free_dtype(float_only=True))
    for _ in args:
        yield want if len(args) == 1 else Want(device=want.device)
