"""Shape generators of the neural-network ops: convolution and pooling (input sizes worked
back from the wanted output through torch's window formula), embedding, attention, and the
recurrent layers."""

from __future__ import annotations

from cuvil.ir.types import DType
from cuvil.ops.draw import Generator, Invalid, Want, cover
from cuvil.ops.registry import pair


def window_in(out: int, k: int, s: int, p: int, d: int, rng) -> int:
    """An input length whose sliding windows give `out` outputs (torch's floor formula)."""
    size = (out - 1) * s + d * (k - 1) + 1 - 2 * p + rng.randint(0, s - 1)
    if size < 1:
        raise Invalid("no input length gives the wanted output")
    return size


def conv2d(ctx, want, attrs, args):
    """x [N, C, H, W] and w [Co, C/groups, kh, kw] worked back from the output."""
    rng = ctx.rng
    s = pair(attrs.get("stride", lambda: rng.choice(((1, 1), (1, 1), (2, 2), (1, 2)))))
    p = pair(attrs.get("padding", lambda: rng.choice(((0, 0), (1, 1), (0, 0), (2, 1)))))
    d = pair(attrs.get("dilation", lambda: rng.choice(((1, 1), (1, 1), (1, 1), (2, 2)))))
    depthwise = not attrs.fixed("groups") and rng.random() < 0.25
    g = attrs.get("groups", lambda: ctx.dim() if depthwise else rng.choice((1, 1, 1, 2)))
    n, co, ho, wo = ctx.fill(want.shape, 4)
    if want.shape is None or want.shape[1] is None:
        co = g * (1 if depthwise else rng.choice((1, 1, 2)))
    if co % g:
        raise Invalid("output channels not a multiple of groups")
    kh, kw = rng.randint(1, 3), rng.randint(1, 3)
    cin = g * (1 if depthwise else ctx.dim())
    x_shape = (n, cin, window_in(ho, kh, s[0], p[0], d[0], rng),
               window_in(wo, kw, s[1], p[1], d[1], rng))
    x = yield Want(x_shape, want.dtype, want.layout, want.device)
    yield Want((co, x.shape[1] // g, kh, kw), x.dtype, None, x.device)


def pool(ctx, want, attrs, args):
    rng = ctx.rng
    k = pair(attrs.get("kernel_size", lambda: rng.choice(((2, 2), (3, 3), (1, 1), 2, 3))))
    stride = attrs.get("stride", lambda: rng.choice(((), (), (1, 1), (2, 2))))
    s = pair(stride) if stride else k
    p = pair(attrs.get("padding", lambda: rng.choice(((0, 0), (0, 0), (k[0] // 2, k[1] // 2)))))
    d = (1, 1)
    if attrs.opdef.name.startswith("max_pool2d"):
        d = pair(attrs.get("dilation", lambda: rng.choice(((1, 1), (1, 1), (2, 2)))))
    else:
        attrs.get("count_include_pad", lambda: rng.random() < 0.7)
    attrs.get("ceil_mode", lambda: rng.random() < 0.2)
    n, c, ho, wo = ctx.fill(want.shape, 4)
    shape = (n, c, window_in(ho, k[0], s[0], p[0], d[0], rng),
             window_in(wo, k[1], s[1], p[1], d[1], rng))
    indices = attrs.opdef.name == "max_pool2d_indices"  # float in, i64 out
    yield want.with_(shape=shape, dtype=DType.f32 if indices else want.dtype)


def pool_backward(ctx, want, attrs, args):
    """grad and indices of a max pool's output shape, x of the wanted one, indices into
    x's planes."""
    from cuvil.ops.nn import window_out  # the catalog module imports this one

    rng = ctx.rng
    k = pair(attrs.get("kernel_size", lambda: rng.choice(((2, 2), (3, 3), 2))))
    stride = attrs.get("stride", lambda: rng.choice(((), (1, 1), (2, 2))))
    s = pair(stride) if stride else k
    p = pair(attrs.get("padding", lambda: rng.choice(((0, 0), (k[0] // 2, k[1] // 2)))))
    d = pair(attrs.get("dilation", lambda: rng.choice(((1, 1), (1, 1), (2, 2)))))
    ceil = attrs.get("ceil_mode", lambda: rng.random() < 0.2)
    n, c, ho, wo = ctx.fill(want.shape, 4)
    shape = (n, c, window_in(ho, k[0], s[0], p[0], d[0], rng),
             window_in(wo, k[1], s[1], p[1], d[1], rng))
    out = tuple(window_out(shape[2 + i], k[i], s[i], p[i], d[i], ceil) for i in (0, 1))
    if min(out) < 1:
        raise Invalid("no window")
    dtype = want.dtype if want.dtype is not None and want.dtype.is_float else DType.f32
    grad = yield Want((n, c, *out), dtype, None, want.device)
    yield Want(shape, grad.dtype, want.layout, grad.device)
    yield Want((n, c, *out), DType.i64, None, grad.device, ("below", shape[2] * shape[3]))


def adaptive_pool(ctx, want, attrs, args):
    rng = ctx.rng
    n, c, ho, wo = ctx.fill(want.shape, 4)
    oh, ow = pair(attrs.get("output_size", lambda: rng.choice(((1, 1), (ho, wo)))))
    shape = (n, c, oh * rng.randint(1, 3) + rng.randint(0, 2),
             ow * rng.randint(1, 3) + rng.randint(0, 2))
    yield want.with_(shape=shape)


def embedding(ctx, want, attrs, args):
    out = ctx.fill(want.shape, ctx.rank(2, 3))
    if not out:
        raise Invalid("embedding never gives a 0-d value")
    w = yield Want((ctx.dim(), out[-1]), want.dtype or DType.f32, None, want.device)
    yield Want(out[:-1], DType.i64, None, w.device, ("below", w.shape[0]))


def attention(ctx, want, attrs, args):
    """q [.., L, E], k [.., S, E], v [.., S, Ev]; a mask broadcasting to [.., L, S]."""
    rng = ctx.rng
    has_mask = len(args) == 4
    attrs.get("is_causal", lambda: not has_mask and rng.random() < 0.3)
    attrs.get("scale", lambda: rng.choice((None, None, 0.5, 0.125)))
    out = ctx.fill(want.shape, ctx.rank(2, 4))
    if len(out) < 2:
        raise Invalid("attention needs rank >= 2")
    *batch, length, ev = out
    q = yield Want((*batch, length, ctx.dim()), want.dtype or DType.f32, None, want.device)
    k = yield Want((*batch, ctx.dim(), q.shape[-1]), q.dtype, None, q.device)
    yield Want((*batch, k.shape[-2], ev), q.dtype, None, q.device)
    if has_mask:
        full = (*batch, length, k.shape[-2])
        mask = cover(full, {}, {0: rng.randint(2, len(full))}, rng)[0]
        dtype = DType.bool if rng.random() < 0.3 else q.dtype
        yield Want(mask, dtype, None, q.device)


def recurrent(ctx, want, attrs, args):
    """x [T, B, I], states [B, H], w_ih [G*H, I], w_hh [G*H, H], biases [G*H], for an
    output [states + T, B, H]."""
    attrs.get("reverse", lambda: ctx.rng.random() < 0.5)
    states = 2 if attrs.opdef.name == "lstm_layer" else 1
    rows, batch, hidden = ctx.fill(want.shape, 3)
    if want.shape is None or want.shape[0] is None:
        rows = states + ctx.dim()
    if rows <= states or (want.dtype is not None and not want.dtype.is_float):
        raise Invalid("a recurrent layer gives its states, then one row per step")
    x = yield Want((rows - states, batch, ctx.dim()), want.dtype or DType.f32, None,
                   want.device)
    gates = hidden * (4 if states == 2 else 3)
    for shape in [(batch, hidden)] * states + [(gates, x.shape[2]), (gates, hidden),
                                               (gates,), (gates,)]:
        yield Want(shape, x.dtype, None, x.device)


def _int8_product(inner: Generator) -> Generator:
    """The float product's generator with integer operands: x u8 (what the int8 rules
    quantize activations to), w i8."""

    def generate(ctx, want, attrs, args):
        steps = inner(ctx, want.with_(dtype=None), attrs, args)
        dtypes = (DType.u8, DType.i8)
        need, k = next(steps, None), 0
        while need is not None:
            got = yield need.with_(dtype=dtypes[min(k, 1)])
            k += 1
            try:
                need = steps.send(got)
            except StopIteration:
                return

    return generate


conv2d_i8 = _int8_product(conv2d)
