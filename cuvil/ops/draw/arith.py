"""Shape generators of the arithmetic ops: elementwise (broadcasting), matmul, reductions,
softmax, the normalisations, scalars and conversions."""

from __future__ import annotations

from cuvil.ir.types import NCHW, NHWC, DType
from cuvil.ops import element
from cuvil.ops.draw import (
    MOSTLY_POSITIVE,
    POSITIVE,
    Invalid,
    Want,
    cover,
    variant,
)

DTYPES = tuple(DType)


def _input_dtypes(opdef, want: Want, n: int, truth: DType | None) -> list[DType | None]:
    """From the op's element expression: truth values get `truth`, a comparison's operands
    any dtype, the rest the wanted one."""
    if not opdef.element:
        return [want.dtype] * n
    names = (*opdef.inputs, *(a.name for a in opdef.attrs))
    truths = element.truth_values(opdef.element, names)
    other = None if element.is_comparison(opdef.element, names) else want.dtype
    return [truth if x in truths else other for x in opdef.inputs[:n]]


def broadcasting(ctx, want, attrs, args):
    """Operands that broadcast to the wanted shape (some of lower rank or with 1s). An
    operand fixed by the ones before it (`x` in `sub(x, amax(x))`) is left as it comes;
    the last free one takes every dim nobody else has."""
    op = attrs.opdef.name
    settled = [ctx.determined(a, args[:i]) for i, a in enumerate(args)]
    shapes = {i: tuple(t.shape) for i, a in enumerate(args) if (t := ctx.known(a)) is not None}
    if want.shape is None and any(shapes.values()):
        shape = max(shapes.values(), key=len)
    else:
        hints = [r for a in args if (r := ctx.rank_hint(a)) is not None]
        least = max(ctx.least_rank(a) for a in args)
        rank = max(hints) if hints and ctx.rng.random() < 0.8 else max([ctx.rank(), *hints])
        shape = ctx.fill(want.shape, max(rank, least))
    free = [i for i in range(len(args)) if not settled[i]]
    coverers = [i for i in free if (ctx.rank_hint(args[i]) or len(shape)) >= len(shape)]
    coverer = (coverers or free or [None])[-1]
    dtypes = _input_dtypes(attrs.opdef, want, len(args), DType.bool)
    for i, arg in enumerate(args):
        if settled[i]:
            t = yield Want(device=want.device)
        else:
            hint = ctx.rank_hint(arg)
            full = op == "masked_fill" and i == 0 or ctx.rng.random() < 0.6
            least = min(ctx.least_rank(arg), len(shape))
            rank = min(hint, len(shape)) if hint is not None else (
                len(shape) if full else ctx.rng.randint(least, len(shape)))
            if op == "masked_fill" and i == 0:
                proposal = shape
            elif i == coverer:
                proposal = cover(shape, shapes, {i: rank}, ctx.rng)[i]
            else:
                proposal = shape if rank == len(shape) and full else variant(shape, rank, ctx.rng)
            layout = want.layout if proposal == shape else None
            domain = MOSTLY_POSITIVE if attrs.opdef.domain == "positive" and i == 0 else None
            loose = not (op == "masked_fill" and i == 0)
            t = yield Want(proposal, dtypes[i], layout, want.device, domain, loose)
        shapes[i] = tuple(t.shape)


def unary(ctx, want, attrs, args):
    """Same shape in, same shape out (a truth-valued input of any dtype). Attributes are
    drawn from their catalog samples."""
    opdef = attrs.opdef
    dtype = _input_dtypes(opdef, want, 1, None)[0]
    if opdef.float_only and dtype is None:
        dtype = ctx.free_dtype(float_only=True)
    yield want.with_(dtype=dtype, domain=MOSTLY_POSITIVE if opdef.domain == "positive" else None)


def _matmul_out_rank(rx: int, ry: int) -> int:
    if rx >= 2 and ry >= 2:
        return max(rx, ry)
    return max(rx, ry) - 1 if max(rx, ry) >= 2 else 0


def _matmul_ranks(ctx, want, args, bmm: bool) -> tuple[int, int]:
    if bmm:
        return 3, 3
    hx, hy = ctx.rank_hint(args[0]), ctx.rank_hint(args[1])
    xs = (hx,) if hx is not None else (2, 2, 3, 1, *(hy, hy)[:2 * (hy is not None)])
    ys = (hy,) if hy is not None else (2, 2, 3, 1, *(hx, hx)[:2 * (hx is not None)])
    options = [(rx, ry) for rx in xs for ry in ys
               if want.rank is None or _matmul_out_rank(rx, ry) == want.rank]
    if not options and want.rank is not None and want.rank >= 2:
        options = [(want.rank, 2), (2, want.rank)]
    if not options:
        raise Invalid("no matmul ranks give the wanted rank")
    return ctx.rng.choice(options)


def matmul_i8(ctx, want, attrs, args):
    """x [.., m, k] (u8 or i8) times w [k, n] (i8)."""
    out = ctx.fill(want.shape, want.rank if want.rank else ctx.rank(1, 3))
    k = ctx.dim()
    x = yield Want((*out[:-1], k), ctx.rng.choice((DType.u8, DType.i8)), None, want.device)
    yield Want((k, out[-1]), DType.i8, None, x.device)


def matmul(ctx, want, attrs, args):
    """x [.., m, k] @ w [.., k, n]: the inner dims agree, the batch dims broadcast."""
    rx, ry = _matmul_ranks(ctx, want, args, attrs.opdef.name == "bmm")
    out = ctx.fill(want.shape, _matmul_out_rank(rx, ry))
    k = ctx.dim()
    if rx >= 2 and ry >= 2:
        batch = out[:-2]
        if attrs.opdef.name == "bmm":
            bx = by = batch
        else:
            split = cover(batch, {}, {0: rx - 2, 1: ry - 2}, ctx.rng)
            bx, by = split[0], split[1]
        x_shape, tail = (*bx, out[-2], k), lambda k: (*by, k, out[-1])
    elif rx == 1 and ry >= 2:
        x_shape, tail = (k,), lambda k: (*out[:-1], k, out[-1])
    else:
        x_shape, tail = ((*out, k) if rx >= 2 else (k,)), lambda k: (k,)
    x = yield Want(x_shape, want.dtype, None, want.device)
    yield Want(tail(x.shape[-1]), x.dtype, None, x.device)


def _reduced_positions(ctx, attrs, want) -> tuple[int, tuple[int, ...]]:
    """(rank of x, the dims it reduces), from the attributes if fixed."""
    rng, keep = ctx.rng, attrs.get("keepdim", lambda: ctx.rng.random() < 0.4)
    if attrs.fixed("dim"):
        dims = attrs.get("dim")
        dims = tuple(dims) if isinstance(dims, tuple | list) else (dims,)
        if not dims:
            rank = want.rank if keep and want.rank is not None else ctx.rank(1, 4)
            return rank, tuple(range(rank))
        least = max(d + 1 if d >= 0 else -d for d in dims)
        if want.rank is not None:
            rank = want.rank if keep else want.rank + len(dims)
        else:
            rank = max(least, ctx.rank(1, 4))
        if rank < least:
            raise Invalid("reduced dims out of range")
        return rank, tuple(sorted({d % rank for d in dims}))
    if want.rank is None:
        rank = ctx.rank(1, 4)
        candidates, count = list(range(rank)), rng.randint(1, rank)
    elif keep:
        rank = want.rank
        candidates = [i for i in range(rank) if want.shape[i] in (None, 1)]
        count = rng.randint(1, len(candidates)) if candidates else 0
    else:
        count = rng.randint(1, 2)
        rank = want.rank + count
        candidates = list(range(rank))
    if not count:
        raise Invalid("no dim to reduce")
    positions = tuple(sorted(rng.sample(candidates, count)))
    if len(positions) == rank and rng.random() < 0.5:
        attrs.get("dim", ())
    else:
        attrs.get("dim", lambda: tuple(p - rank if rng.random() < 0.3 else p for p in positions))
    return rank, positions


def reduction(ctx, want, attrs, args):
    rank, positions = _reduced_positions(ctx, attrs, want)
    keep = attrs.get("keepdim")
    if keep:
        base = list(ctx.fill(want.shape, rank))
    else:
        out = iter(ctx.fill(want.shape, rank - len(positions)))
        base = [None if i in positions else next(out) for i in range(rank)]
    shape = tuple((None if want.loose else ctx.dim()) if i in positions else d
                  for i, d in enumerate(base))
    dtype = want.dtype if want.dtype is not None and want.dtype.is_float else None
    yield Want(shape, dtype, want.layout if keep else None, want.device, loose=want.loose)


def softmax(ctx, want, attrs, args):
    if attrs.fixed("dim"):
        d = attrs.get("dim")
        least = d + 1 if d >= 0 else -d
        shape = ctx.fill(want.shape, max(least, ctx.rank(1, 4)))
    else:
        shape = ctx.fill(want.shape, ctx.rank(1, 4))
        r = len(shape)
        attrs.get("dim", lambda: ctx.rng.randint(-r, r - 1) if r else 0)
    yield want.with_(shape=shape, dtype=want.dtype or DType.f32)


def layer_norm(ctx, want, attrs, args):
    attrs.get("eps", lambda: ctx.rng.choice((1e-5, 1e-3)))
    if attrs.fixed("normalized_shape"):
        ns = tuple(attrs.get("normalized_shape"))
        lead = ctx.fill(None, ctx.rng.randint(0, 2))
        shape = want.shape or (*lead, *ns)
    else:
        shape = ctx.fill(want.shape, ctx.rank(1, 4))
        k = 2 if len(shape) >= 3 and ctx.rng.random() < 0.3 else 1
        ns = tuple(attrs.get("normalized_shape", tuple(shape[len(shape) - k:])))
    x = yield want.with_(shape=shape, dtype=want.dtype or DType.f32)
    for _ in args[1:]:
        yield Want(ns, x.dtype, None, x.device)


def layer_norm_rstd(ctx, want, attrs, args):
    """x whose trailing dims are the normalized shape (the result keeps them as 1)."""
    attrs.get("eps", lambda: ctx.rng.choice((1e-5, 1e-3)))
    if attrs.fixed("normalized_shape"):
        ns = tuple(attrs.get("normalized_shape"))
        shape = (*ctx.fill(None, ctx.rng.randint(0, 2)), *ns)
    else:
        shape = ctx.fill(None, ctx.rank(1, 4))
        k = 2 if len(shape) >= 3 and ctx.rng.random() < 0.3 else 1
        attrs.get("normalized_shape", tuple(shape[len(shape) - k:]))
    dtype = want.dtype if want.dtype in (DType.f32, DType.f64) else DType.f32
    yield Want(shape, dtype, None, want.device)


def layer_norm_grad(ctx, want, attrs, args):
    """dy and x of one shape, mean and rstd (positive) with the normalized dims kept as 1,
    the weight over the normalized dims."""
    shape = ctx.fill(want.shape, ctx.rank(1, 4))
    k = 2 if len(shape) >= 3 and ctx.rng.random() < 0.3 else 1
    ns = tuple(attrs.get("normalized_shape", tuple(shape[len(shape) - k:])))
    dtype = want.dtype if want.dtype in (DType.f32, DType.f64) else DType.f32
    dy = yield want.with_(shape=shape, dtype=dtype)
    if not dy.dtype.is_float or len(ns) > dy.rank or tuple(dy.shape[dy.rank - len(ns):]) != ns:
        raise Invalid("layer_norm_grad: dy must be float and end in the normalized shape")
    yield Want(dy.shape, dy.dtype, None, dy.device)
    stats = (*dy.shape[:dy.rank - len(ns)], *(1,) * len(ns))
    yield Want(stats, dy.dtype, None, dy.device)
    yield Want(stats, dy.dtype, None, dy.device, POSITIVE)
    yield Want(ns, dy.dtype, None, dy.device)


def batch_norm(ctx, want, attrs, args):
    attrs.get("eps", lambda: ctx.rng.choice((1e-5, 1e-3)))
    x = yield want.with_(shape=ctx.fill(want.shape, ctx.rank(2, 4)),
                         dtype=want.dtype or DType.f32)
    if x.rank < 2:
        raise Invalid("batch_norm needs rank >= 2")
    for i in range(1, len(args)):
        yield Want((x.shape[1],), x.dtype, None, x.device, POSITIVE if i == 4 else None)


def batch_norm_weight_grad(ctx, want, attrs, args):
    """dy and x of one shape (rank 2-4), the channel mean and a positive invstd."""
    dtype = want.dtype if want.dtype in (DType.f32, DType.f64) else DType.f32
    shape = list(ctx.fill(None, ctx.rank(2, 4)))
    if want.shape and want.shape[0] is not None:
        shape[1] = want.shape[0]
    dy = yield Want(tuple(shape), dtype, None, want.device)
    yield Want(dy.shape, dy.dtype, None, dy.device)
    yield Want((dy.shape[1],), dy.dtype, None, dy.device)
    yield Want((dy.shape[1],), dy.dtype, None, dy.device, POSITIVE)


def scalar(ctx, want, attrs, args):
    attrs.get("value", ctx.scalar)
    attrs.get("dtype", str(want.dtype) if want.dtype else "f32")
    yield from ()


def cast(ctx, want, attrs, args):
    attrs.get("dtype", lambda: str(want.dtype or ctx.rng.choice(DTYPES)))
    source = ctx.rng.choice(DTYPES) if ctx.rng.random() < 0.4 else None
    yield want.with_(dtype=source)


def to_layout(ctx, want, attrs, args):
    shape = ctx.fill(want.shape)
    layouts = (NCHW, NHWC, "contiguous") if len(shape) == 4 else ("contiguous",)
    attrs.get("layout", lambda: want.layout or ctx.rng.choice(layouts))
    yield want.with_(shape=shape, layout=None)


def to_device(ctx, want, attrs, args):
    attrs.get("device", lambda: want.device or ctx.rng.choice(("cpu", "cuda")))
    yield want.with_(device=ctx.rng.choice((None, "cpu", "cuda")))


def quantize(ctx, want, attrs, args):
    attrs.get("scale", lambda: ctx.rng.choice((0.05, 0.1, 0.25)))
    attrs.get("zero_point", lambda: ctx.rng.choice((0, 3, -2)))
    attrs.get("dtype", lambda: str(want.dtype) if want.dtype else ctx.rng.choice(("i8", "u8")))
    yield want.with_(dtype=ctx.rng.choice((DType.f32, DType.f32, DType.f64, DType.f16)))


def dequantize(ctx, want, attrs, args):
    attrs.get("scale", lambda: ctx.rng.choice((0.05, 0.1, 0.25)))
    attrs.get("zero_point", lambda: ctx.rng.choice((0, 3, -2)))
    yield want.with_(dtype=ctx.rng.choice((DType.i8, DType.u8, DType.i32)))

