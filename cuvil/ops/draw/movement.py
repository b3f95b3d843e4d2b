"""Shape generators of the movement ops: reshape, permute, transpose, flatten, squeeze,
unsqueeze, expand, cat, slice, select. Each derives its input from the wanted output, so a
chain of them (`reshape(reshape(x, a), b)`) is valid by construction. Also `arange`, which
has no input: its attributes make the wanted 1-d output."""

from __future__ import annotations

import math

from cuvil.ir.types import DType
from cuvil.ops.draw import Invalid, Want, factorize

NUMERIC = ("f32", "f64", "i32", "i64")


def _least_rank(dims) -> int:
    """The smallest rank for which every (possibly negative) dim index is in range."""
    return max((d + 1 if d >= 0 else -d for d in dims), default=0)


def reshape(ctx, want, attrs, args):
    """Same elements, another shape; the target may hold one -1."""
    rng = ctx.rng
    if attrs.fixed("shape"):
        target = tuple(attrs.get("shape"))
        fill = ctx.dim() if -1 in target else 1
        n = math.prod(d for d in target if d != -1) * fill
    else:
        out = ctx.fill(want.shape)
        n = math.prod(out)
        hole = rng.randrange(len(out)) if out and rng.random() < 0.3 else None
        attrs.get("shape", tuple(-1 if i == hole else d for i, d in enumerate(out)))
    yield want.with_(shape=factorize(n, ctx.rank(1, 4), rng), layout=None)


def flip(ctx, want, attrs, args):
    shape = ctx.fill(want.shape, ctx.rank(1, 4))
    r = len(shape)
    dims = attrs.get("dims", lambda: tuple(
        d - r if ctx.rng.random() < 0.2 else d
        for d in sorted(ctx.rng.sample(range(r), ctx.rng.randint(1, r)))))
    if not dims or any(not -r <= d < r for d in dims) or \
            len({d % r for d in dims}) != len(dims):
        raise Invalid("flip dims out of range or repeated")
    yield want.with_(shape=tuple(shape), layout=None)


def permute(ctx, want, attrs, args):
    rng = ctx.rng
    if attrs.fixed("dims"):
        dims = tuple(attrs.get("dims"))
        out = ctx.fill(want.shape, len(dims))
    else:
        out = ctx.fill(want.shape)
        order = list(range(len(out)))
        rng.shuffle(order)
        dims = attrs.get("dims", tuple(d - len(out) if rng.random() < 0.2 else d for d in order))
    r = len(out)
    if r != len(dims) or sorted(d % max(r, 1) for d in dims) != list(range(r)):
        raise Invalid("not a permutation of the wanted rank")
    shape = [0] * r
    for i, d in enumerate(dims):
        shape[d % r] = out[i]
    yield want.with_(shape=tuple(shape), layout=None)


def transpose(ctx, want, attrs, args):
    rng = ctx.rng
    fixed = [attrs.get(k) for k in ("dim0", "dim1") if attrs.fixed(k)]
    out = ctx.fill(want.shape, max(ctx.rank(1, 4), _least_rank(fixed)))
    r = len(out)
    d0 = attrs.get("dim0", lambda: rng.randint(-r, r - 1))
    d1 = attrs.get("dim1", lambda: rng.randint(-r, r - 1))
    if max(r, 1) < _least_rank((d0, d1)):
        raise Invalid("transpose dims out of range")
    shape = list(out)
    if r:
        shape[d0 % r], shape[d1 % r] = shape[d1 % r], shape[d0 % r]
    yield want.with_(shape=tuple(shape), layout=None)


def flatten(ctx, want, attrs, args):
    """Dims start_dim..end_dim of the input multiply to one dim of the output."""
    rng = ctx.rng
    if want.rank == 0:
        raise Invalid("flatten never gives a 0-d value")
    if want.rank is None:
        rank = ctx.rank(1, 4)
        extra = rng.randint(0, rank - 1)
    else:
        extra = rng.randint(0, 2)
        rank = want.rank + extra
    if attrs.fixed("start_dim"):
        s = attrs.get("start_dim") % rank
        e = s + extra
    elif attrs.fixed("end_dim"):
        e = attrs.get("end_dim") % rank
        s = e - extra
    else:
        s = rng.randint(0, rank - 1 - extra)
        e = s + extra
    s = attrs.get("start_dim", s)
    e = attrs.get("end_dim", lambda: e - rank if rng.random() < 0.5 else e)
    if max(rank, 1) < _least_rank((s, e)) or s % rank > e % rank:
        raise Invalid("flatten dims out of range")
    s, e = s % rank, e % rank
    out = ctx.fill(want.shape, rank - (e - s))
    if len(out) != rank - (e - s):
        raise Invalid("flatten cannot give the wanted rank")
    shape = (*out[:s], *factorize(out[s], e - s + 1, rng), *out[s + 1:])
    yield want.with_(shape=shape, layout=None)


def unsqueeze(ctx, want, attrs, args):
    out = list(ctx.fill(want.shape, ctx.rank(1, 4)))
    r = len(out)
    d = attrs.get("dim", lambda: ctx.rng.randint(-r, r - 1))
    if not -r <= d < r or want.shape is not None and want.shape[d] not in (None, 1):
        raise Invalid("unsqueeze dim does not fit the wanted shape")
    del out[d % r]
    yield want.with_(shape=tuple(out), layout=None)


def squeeze(ctx, want, attrs, args):
    rng = ctx.rng
    out = list(ctx.fill(want.shape, ctx.rank(0, 3), lo=2))
    rank = len(out) + rng.randint(1, 2)
    if attrs.fixed("dim") and attrs.get("dim") != ():
        dims = attrs.get("dim")
        dims = tuple(dims) if isinstance(dims, tuple | list) else (dims,)
        rank = max(len(out) + len(set(dims)), _least_rank(dims))
        ones = {d % rank for d in dims}
    else:
        ones = set(rng.sample(range(rank), rank - len(out)))
        attrs.get("dim", lambda: () if rng.random() < 0.4 else tuple(sorted(ones)))
    if len(ones) != rank - len(out):
        raise Invalid("squeeze dims do not fit the wanted rank")
    rest = iter(out)
    yield want.with_(shape=tuple(1 if i in ones else next(rest) for i in range(rank)),
                     layout=None)


def expand(ctx, want, attrs, args):
    rng = ctx.rng
    if attrs.fixed("shape"):
        target = tuple(attrs.get("shape"))
        least = next((len(target) - i for i, d in enumerate(target) if d == -1), 0)
        rank = rng.randint(least, len(target))
        shape = tuple(ctx.dim() if d == -1 else rng.choice((d, 1))
                      for d in target[len(target) - rank:])
    else:
        out = ctx.fill(want.shape)
        rank = rng.randint(0, len(out))
        lead = len(out) - rank
        shape = tuple(rng.choice((d, 1)) for d in out[lead:])
        attrs.get("shape", tuple(-1 if i >= lead and shape[i - lead] == d and rng.random() < 0.3
                                 else d for i, d in enumerate(out)))
    yield want.with_(shape=shape, layout=None)


def cat(ctx, want, attrs, args):
    rng = ctx.rng
    fixed = attrs.get("dim") if attrs.fixed("dim") else None
    rank = max(ctx.rank(1, 4), _least_rank((fixed,)) if fixed is not None else 1)
    out = list(ctx.fill(want.shape, rank))
    r = len(out)
    d = attrs.get("dim", lambda: rng.randint(-r, r - 1))
    if not r or not -r <= d < r:
        raise Invalid("cat dim out of range")
    d %= r
    n = len(args)
    if want.shape is None or want.shape[d] is None:
        out[d] = max(out[d], n)
    if out[d] < n:
        raise Invalid("cat dim too small to split")
    cuts = sorted(rng.sample(range(1, out[d]), n - 1))
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, out[d]], strict=True)]
    first = None
    for size in sizes:
        t = yield Want((*out[:d], size, *out[d + 1:]), first, None, want.device)
        first = first or t.dtype


def slice_(ctx, want, attrs, args):
    rng = ctx.rng
    rank = max(ctx.rank(1, 4), _least_rank((attrs.get("dim"),)) if attrs.fixed("dim") else 1)
    out = list(ctx.fill(want.shape, rank))
    r = len(out)
    d = attrs.get("dim", lambda: rng.randint(-r, r - 1))
    if not r or not -r <= d < r:
        raise Invalid("slice dim out of range")
    d %= r
    step = attrs.get("step", lambda: rng.choice((1, 1, 2)))
    start = attrs.get("start", lambda: rng.choice((0, 0, 1, 2, -3)))
    end = attrs.get("end", lambda: rng.choice((None, None, -1, out[d] + 2)))
    length = out[d] if want.shape is not None and want.shape[d] is not None else None
    sizes = [n for n in range(1, 3 * ctx.max_dim + 8)
             if length is None or len(range(*slice(start, end, step).indices(n))) == length]
    if not sizes or step < 1:
        raise Invalid("no input size gives the wanted slice")
    out[d] = rng.choice(sizes)
    yield want.with_(shape=tuple(out), layout=None)


def select(ctx, want, attrs, args):
    rng = ctx.rng
    out = ctx.fill(want.shape, ctx.rank(0, 3))
    rank = len(out) + 1
    d = attrs.get("dim", lambda: rng.randint(-rank, rank - 1))
    if not -rank <= d < rank:
        raise Invalid("select dim out of range")
    d %= rank
    if attrs.fixed("index"):
        i = attrs.get("index")
        size = max(ctx.dim(), i + 1 if i >= 0 else -i)
    else:
        size = ctx.dim()
        attrs.get("index", lambda: rng.randint(-size, size - 1))
    yield want.with_(shape=(*out[:d], size, *out[d:]), layout=None)


def arange(ctx, want, attrs, args):
    if want.rank not in (None, 1) or want.dtype is DType.bool:
        raise Invalid("arange makes a 1-d numeric tensor")
    attrs.get("shape", (ctx.fill(want.shape, 1)[0],))
    attrs.get("start", lambda: ctx.rng.randint(-3, 3))
    attrs.get("step", lambda: ctx.rng.choice((1, 2, 3)))
    attrs.get("dtype", lambda: str(want.dtype) if want.dtype else ctx.rng.choice(NUMERIC))
    yield from ()
