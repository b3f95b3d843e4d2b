"""The f32 register tile turned around for the direct convolution: output channels in the
vectors, output pixels in the broadcasts (what ONNX Runtime's NCHWc kernels do), on NCHW
images. The accumulators are transposed in registers before they are stored.

`f32_tile`'s tile puts pixels in the vectors: each step loads 16 neighbouring pixels of a
tap, which for every tap but one in three starts off a 64-byte line (two line reads per
load), and a stride-2 image must first be split into its stride phases. Here step k loads
the weight's row k (output channels, contiguous in the [C*KH*KW, OC] weight, the same one
`conv_direct` uses) and broadcasts one input scalar per pixel, from any stride.

    pixel_tile_kernel(mr, nv, stride)(x, q0, offs, kk, w, w0, ldw, d, d0, plane, pixels,
                                      chans, b, r, lo, hi, flags)

computes, for pixel m < pixels (m < mr, a power of two up to 16) and channel t < chans
(t < 16*nv), d[d0 + t*plane + m] = the sum over k < kk of x[q0 + offs[k] + m*stride] *
w[w0 + k*ldw + t], then (flags != 0) the convolution's epilogue on it while it is in
registers: + b[w0 + t] (flags & 1), + r[d0 + t*plane + m] (flags & 2), clipped to
[lo, hi] (flags & 4 marks a clip alone). All arrays f32 but offs; b and r may be empty
when their flag is off.
"""

from __future__ import annotations

from functools import cache

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from cuvil.targets.cpu.kernels.f32_tile import (
    I32,
    LANES,
    VEC,
    accumulate,
    broadcast,
    clamp,
    declare,
    flagged_pointer,
    lane_masks,
    masked_load,
)

_ALIGN = ir.Constant(I32, 4)


def _step_loop(builder, ptrs, kk, ldw, wmask, mr: int, nv: int, stride: int) -> list:
    """The loop over the kk steps; the mr*nv accumulators after it (zero if kk = 0):
    accumulator m*nv + v holds pixel m of channels 16v..16v+15."""
    xb, ob, wb = ptrs
    fma, load = declare(builder, "llvm.fma.v16f32", VEC, [VEC] * 3), masked_load(builder)
    zero, intp = ir.Constant(VEC, None), kk.type

    def step(builder, k, accs):
        xrow = builder.gep(xb, [builder.load(builder.gep(ob, [k]))])
        wrow = builder.gep(wb, [builder.mul(k, ldw)])
        ws = [builder.call(load, [builder.bitcast(builder.gep(wrow, [ir.Constant(
            intp, LANES * v)]), VEC.as_pointer()), _ALIGN, wmask[v], zero]) for v in range(nv)]
        new = []
        for m in range(mr):
            xm = broadcast(builder, builder.load(builder.gep(xrow, [ir.Constant(
                intp, m * stride)])))
            new += [builder.call(fma, [xm, ws[v], accs[m * nv + v]]) for v in range(nv)]
        return new

    return accumulate(builder, kk, mr * nv, step)


@cache
def transpose_plan(mr: int) -> tuple[list, list[list[int]]]:
    """The shuffles that turn mr vectors (vector m: pixel m of 16 channels, lane = channel)
    into mr vectors of 16/mr channels x mr pixels each (lane = channel slot * mr + pixel),
    and the channels of each of those.

    One list per round; round entry (a, b, mask, out): new[out] = `shuffle(old[a],
    old[b], mask)`. Each round pairs vectors holding neighbouring pixel runs and the same
    channels: the channels are halved between the pair's two outputs, the runs joined.
    """
    vecs = [(list(range(LANES)), [m]) for m in range(mr)]  # (channels, pixels) per vector
    rounds = []
    while len(vecs[0][1]) < mr:
        step, new, plan = len(vecs[0][1]), [None] * mr, []
        pairs = [(a, a + step) for g in range(0, mr, 2 * step) for a in range(g, g + step)]
        for a, b in pairs:
            chans, pix = vecs[a][0], vecs[a][1] + vecs[b][1]
            half = len(chans) // 2
            for kept, out in ((chans[:half], a), (chans[half:], b)):
                new[out] = (kept, pix)
                plan.append((a, b, [_source(vecs, a, b, c, p) for c in kept for p in pix], out))
        rounds.append(plan)
        vecs = new
    return rounds, [chans for chans, _ in vecs]


def _source(vecs, a: int, b: int, chan: int, pixel: int) -> int:
    """Lane of (chan, pixel) in the concatenation old[a] ++ old[b]."""
    for base, (chans, pixels) in ((0, vecs[a]), (LANES, vecs[b])):
        if pixel in pixels:
            return base + chans.index(chan) * len(pixels) + pixels.index(pixel)
    raise AssertionError("pixel in neither vector")


def _transposed(builder, vecs, mr: int) -> list:
    """`transpose_plan`'s shuffles applied to vecs."""
    for rnd in transpose_plan(mr)[0]:
        old, vecs = vecs, list(vecs)
        for a, b, mask, out in rnd:
            vecs[out] = builder.shuffle_vector(old[a], old[b], ir.Constant(
                ir.VectorType(I32, LANES), mask))
    return vecs


def _store_transposed(builder, vecs, at, pixels, chans, mr: int, v: int, post=None) -> None:
    """Stores vector group v (vecs[m]: pixel m of channels 16v..16v+15): channel 16v + t's
    mr pixels at `at(channel)`, masked to `pixels` pixels and `chans` channels; each
    through `post(builder, part, channel, mask)` if given."""
    intp, sub = pixels.type, ir.VectorType(ir.FloatType(), mr)
    store = declare(builder, f"llvm.masked.store.v{mr}f32.p0", ir.VoidType(),
                    [sub, sub.as_pointer(), I32, ir.VectorType(ir.IntType(1), mr)])
    lanes = ir.Constant(ir.VectorType(intp, mr), list(range(mr)))
    live_pixels = builder.icmp_signed("<", lanes, broadcast(builder, pixels, mr))
    for vec, held in zip(_transposed(builder, vecs, mr), transpose_plan(mr)[1], strict=True):
        for slot, t in enumerate(held):
            chan = ir.Constant(intp, LANES * v + t)
            live = builder.and_(live_pixels, broadcast(builder, builder.icmp_signed(
                "<", chan, chans), mr))
            part = vec if mr == LANES else builder.shuffle_vector(
                vec, ir.Constant(VEC, ir.Undefined), ir.Constant(
                    ir.VectorType(I32, mr), list(range(slot * mr, slot * mr + mr))))
            if post is not None:
                part = post(builder, part, chan, live)
            builder.call(store, [part, builder.bitcast(at(builder, chan), sub.as_pointer()),
                                 _ALIGN, live])


def _epilogue(builder, res_at, flags, lo, hi, mr: int):
    """`post` for `_store_transposed`: clip(part + the residual, if flags & 2), with NaN
    kept (as torch's clamp and relu keep it)."""
    sub = ir.VectorType(ir.FloatType(), mr)
    load = declare(builder, f"llvm.masked.load.v{mr}f32.p0", sub,
                   [sub.as_pointer(), I32, ir.VectorType(ir.IntType(1), mr), sub])
    has_res = builder.icmp_signed("!=", builder.and_(flags, ir.Constant(flags.type, 2)),
                                  ir.Constant(flags.type, 0))
    low, high = broadcast(builder, lo, mr), broadcast(builder, hi, mr)

    def post(builder, part, chan, live):
        mask = builder.and_(live, broadcast(builder, has_res, mr))
        ptr = builder.bitcast(res_at(builder, chan), sub.as_pointer())
        part = builder.fadd(part, builder.call(load, [ptr, _ALIGN, mask,
                                                      ir.Constant(sub, None)]))
        return clamp(builder, part, low, high)

    return post


@cache
def pixel_tile_kernel(mr: int, nv: int, stride: int):
    """The tile of mr pixels (a power of two, 2..16) x nv vectors of 16 output channels,
    its pixels `stride` apart in x (see the module docstring), with the epilogue when
    `flags` is not 0: the bias b[w0 + t] (flags & 1), the residual r[d0 + t*plane + m]
    (flags & 2, r laid out as d), then the clip to [lo, hi]."""
    if mr not in (2, 4, 8, 16):
        raise ValueError(f"pixel_tile_kernel: {mr} pixels (2, 4, 8 or 16)")

    @intrinsic
    def tile(typingctx, x, q0, offs, kk, w, w0, ldw, d, d0, plane, pixels, chans, b, r, lo,
             hi, flags):
        if any(getattr(a, "dtype", None) != types.float32 for a in (x, w, d, b, r)):
            return None
        ip, f32 = types.intp, types.float32
        sig = types.void(x, ip, offs, ip, w, ip, ip, d, ip, ip, ip, ip, b, r, f32, f32, ip)

        def codegen(context, builder, signature, args):
            data = [context.make_array(signature.args[i])(context, builder, args[i]).data
                    for i in (0, 2, 4, 7, 12, 13)]
            ptrs = (builder.gep(data[0], [args[1]]), data[1], builder.gep(data[2], [args[5]]))
            wmask = lane_masks(builder, args[11], nv)
            accs = _step_loop(builder, ptrs, args[3], args[6], wmask, mr, nv, stride)
            _stores(builder, accs, data, args, wmask, mr, nv)
            return context.get_dummy_value()

        return sig, codegen

    return tile


def _stores(builder, accs, data, args, wmask, mr: int, nv: int) -> None:
    """The tile's stores: plain when flags is 0, else through the epilogue (the bias added
    before the transpose, the residual and the clip after it)."""
    plane, pixels, chans, lo, hi, flags = (args[i] for i in (9, 10, 11, 14, 15, 16))
    zero = ir.Constant(flags.type, 0)
    db, rb = (builder.gep(data[i], [args[8]]) for i in (3, 5))
    plain, post = builder.append_basic_block("plain"), builder.append_basic_block("post")
    done = builder.append_basic_block("stored")
    builder.cbranch(builder.icmp_signed("==", flags, zero), plain, post)

    def place(base):
        return lambda builder, chan: builder.gep(base, [builder.mul(chan, plane)])

    builder.position_at_end(plain)
    for v in range(nv):
        _store_transposed(builder, accs[v::nv], place(db), pixels, chans, mr, v)
    builder.branch(done)
    builder.position_at_end(post)
    has_bias = builder.icmp_signed("!=", builder.and_(flags, ir.Constant(flags.type, 1)), zero)
    bb = flagged_pointer(builder, flags, 1, data[4], data[3])
    rb = flagged_pointer(builder, flags, 2, rb, db)
    load, epilogue = masked_load(builder), _epilogue(builder, place(rb), flags, lo, hi, mr)
    for v in range(nv):
        bias = builder.call(load, [builder.bitcast(builder.gep(bb, [builder.add(
            args[5], ir.Constant(args[5].type, LANES * v))]), VEC.as_pointer()), _ALIGN,
            builder.and_(wmask[v], broadcast(builder, has_bias, LANES)), ir.Constant(VEC, None)])
        _store_transposed(builder, [builder.fadd(a, bias) for a in accs[v::nv]], place(db),
                          pixels, chans, mr, v, epilogue)
    builder.branch(done)
    builder.position_at_end(done)
