"""Shape generators of the scans and advanced indexing: `cumsum` and `diff` (the input is
the output's shape, one longer along `dim` for `diff`) and `index` (an input whose dims
from `start` on are indexed by tensors of the wanted output's middle dims), `gather` (an
index of the wanted shape)."""

from __future__ import annotations

from cuvil.ir.types import DType
from cuvil.ops.draw import Invalid, Want

SUMMED = (DType.f32, DType.f64)  # cumsum keeps these; integers and bools sum to i64
INTEGERS = (DType.i32, DType.i64, DType.bool)


def _scan_shape(ctx, want, attrs) -> tuple[list[int], int]:
    rank = ctx.rank(1, 4) if want.rank is None else want.rank
    out = list(ctx.fill(want.shape, rank))
    r = len(out)
    if not r:
        raise Invalid("a scan of a 0-d value")
    d = attrs.get("dim", lambda: ctx.rng.randint(-r, r - 1))
    if not -r <= d < r:
        raise Invalid("scan dim out of range")
    return out, d % r


def cumsum(ctx, want, attrs, args):
    out, _ = _scan_shape(ctx, want, attrs)
    if want.dtype in SUMMED:
        dtype = want.dtype
    elif want.dtype in (None, DType.i64):
        dtype = ctx.rng.choice(SUMMED + INTEGERS) if want.dtype is None else \
            ctx.rng.choice(INTEGERS)
    else:
        raise Invalid(f"cumsum never gives {want.dtype}")
    yield want.with_(shape=tuple(out), dtype=dtype, layout=None)


def diff(ctx, want, attrs, args):
    out, d = _scan_shape(ctx, want, attrs)
    out[d] += 1
    yield want.with_(shape=tuple(out), layout=None)


def index(ctx, want, attrs, args):
    """out = x.shape[:start] + picked + x.shape[start + k:], k = the index tensors."""
    rng, k = ctx.rng, len(args) - 1
    out = ctx.fill(want.shape, ctx.rank(1, 4))
    start = attrs.get("start", lambda: rng.randint(0, len(out)))
    if not 0 <= start <= len(out):
        raise Invalid("index start out of range")
    picked = rng.randint(0, len(out) - start)
    sizes = tuple(ctx.dim() for _ in range(k))
    x_shape = (*out[:start], *sizes, *out[start + picked:])
    x = yield want.with_(shape=x_shape, layout=None)
    middle = out[start:start + picked]
    for j in range(k):
        shape = middle if j == 0 else tuple(1 if rng.random() < 0.3 else m for m in middle)
        yield Want(shape, DType.i64, None, x.device, ("below", x.shape[start + j]))


def gather(ctx, want, attrs, args):
    """index: the wanted shape; x: as large or larger off `dim`, any length along it."""
    out = ctx.fill(want.shape, ctx.rank(1, 4))
    r = len(out)
    if not r:
        raise Invalid("a 0-d gather")
    d = attrs.get("dim", lambda: ctx.rng.randint(-r, r - 1)) % r
    x_shape = tuple(ctx.dim() if k == d else n + ctx.rng.choice((0, 0, 1)) for k, n in
                    enumerate(out))
    x = yield want.with_(shape=x_shape, layout=None)
    yield Want(tuple(out), DType.i64, None, x.device, ("below", x.shape[d]))
