"""The depthwise micro-kernel in LLVM IR: one strip of 16*nv columns of a channel plane's
output, every row of it, for a KH x KW stride-1 window, with the bias and the clip fused.

The strip walks down the input rows once. Each input row's KW shifted vectors are loaded
once and added into the KH output rows that read them, whose sums ride along in registers
(a loop-carried window of KH sums per vector); when the oldest is complete it is stored,
bias added and clipped. Per input row that is KW loads for KH*KW FMAs, and no output row
is read back.

Taps outside the plane read zero without being read: loads are masked to the lanes inside
the plane (a row outside it to none), so the plane is never copied into a zero border (the
copy cost as much as the taps). Masks are kept as scalar bits and moved to a mask register
at each use: vectors of i1 live across the loop spilled, and branched, at every load.

Numba's own loop along an output row stays scalar for rows under LLVM's vector loop
minimum (MobileNet's 32 pixels, ImageNet's 14 and 7); this kernel does not.
"""

from __future__ import annotations

from functools import cache

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from cuvil.targets.cpu.kernels.f32_tile import (
    I32,
    LANES,
    MASK,
    VEC,
    broadcast,
    clamp,
    declare,
    masked_load,
    masked_store,
)

I16 = ir.IntType(16)


def _clamp16(builder, value):
    """`value` (an intp) clamped to [0, 16], as an i32."""
    intp = value.type
    value = builder.select(builder.icmp_signed("<", value, ir.Constant(intp, 0)),
                           ir.Constant(intp, 0), value)
    value = builder.select(builder.icmp_signed(">", value, ir.Constant(intp, LANES)),
                           ir.Constant(intp, LANES), value)
    return builder.trunc(value, I32)


def _bits(builder, first, end, v: int):
    """The lanes l of vector v with first <= 16v + l < end, as an i16 of mask bits."""
    shift = ir.Constant(first.type, LANES * v)
    lo = _clamp16(builder, builder.sub(first, shift))
    hi = _clamp16(builder, builder.sub(end, shift))
    hi = builder.select(builder.icmp_signed("<", hi, lo), lo, hi)
    one = ir.Constant(I32, 1)
    return builder.trunc(builder.sub(builder.shl(one, hi), builder.shl(one, lo)), I16)


def _mask(builder, bits, live):
    """The <16 x i1> mask of an i16 of bits, emptied unless `live`."""
    return builder.bitcast(builder.select(live, bits, ir.Constant(I16, 0)), MASK)


def _column_bits(builder, j0, width, cols, kw: int, nv: int) -> list[list]:
    """bits[b][v]: the lanes of tap column b, vector v, inside the plane and the strip."""
    out = []
    for b in range(kw):
        at = builder.add(j0, ir.Constant(j0.type, b))
        right = builder.sub(width, at)  # the first lane past the plane
        end = builder.select(builder.icmp_signed("<", right, cols), right, cols)
        out.append([_bits(builder, builder.neg(at), end, v) for v in range(nv)])
    return out


def _add_row(builder, sums, row, inside, weights, bits, kh: int, kw: int) -> list[list]:
    """`sums[a][v]` (output row t - a) plus tap row a of the input row at `row`."""
    load, fma = masked_load(builder), declare(builder, "llvm.fma.v16f32", VEC, [VEC] * 3)
    zero, intp = ir.Constant(VEC, None), ir.IntType(64)
    sums = [list(s) for s in sums]
    for b in range(kw):
        for v in range(len(bits[b])):
            ptr = builder.bitcast(builder.gep(row, [ir.Constant(intp, b + LANES * v)]),
                                  VEC.as_pointer())
            x = builder.call(load, [ptr, ir.Constant(I32, 4), _mask(builder, bits[b][v], inside),
                                    zero])
            for a in range(kh):
                sums[a][v] = builder.call(fma, [weights[a * kw + b], x, sums[a][v]])
    return sums


def _store_row(builder, done, out, live, bits, epilogue) -> None:
    """The finished output row `done` (bias added, clipped) to `out`, lanes masked."""
    store, bias, lo, hi = masked_store(builder), *epilogue
    for v in range(len(bits)):
        ptr = builder.bitcast(builder.gep(out, [ir.Constant(ir.IntType(64), LANES * v)]),
                              VEC.as_pointer())
        value = clamp(builder, builder.fadd(done[v], bias), lo, hi)
        builder.call(store, [value, ptr, ir.Constant(I32, 4), _mask(builder, bits[v], live)])


def _strip(builder, ptrs, geometry, weights, epilogue, shape: tuple[int, int, int]) -> None:
    """The loop over t = 0 .. OH + KH - 2: input row i0 + t goes into output rows t - a;
    output row t - KH + 1 is then complete."""
    (xb, db), (kh, kw, nv) = ptrs, shape
    height, width, i0, j0, ldd, oh, cols = geometry
    intp, zero = i0.type, ir.Constant(VEC, None)
    bits = _column_bits(builder, j0, width, cols, kw, nv)
    out_bits = [_bits(builder, ir.Constant(intp, 0), cols, v) for v in range(nv)]
    trips = builder.add(oh, ir.Constant(intp, kh - 1))
    pre = builder.block
    loop, done = builder.append_basic_block("strip"), builder.append_basic_block("stripped")
    builder.branch(loop)
    builder.position_at_end(loop)
    t = builder.phi(intp)
    carried = [[builder.phi(VEC) for _ in range(nv)] for _ in range(kh - 1)]
    s = builder.add(i0, t)
    inside = builder.and_(builder.icmp_signed(">=", s, ir.Constant(intp, 0)),
                          builder.icmp_signed("<", s, height))
    row = builder.gep(xb, [builder.add(builder.mul(s, width), j0)])
    sums = _add_row(builder, [[zero] * nv, *carried], row, inside, weights, bits, kh, kw)
    o = builder.sub(t, ir.Constant(intp, kh - 1))
    live = builder.icmp_signed(">=", o, ir.Constant(intp, 0))
    _store_row(builder, sums[kh - 1], builder.gep(db, [builder.mul(o, ldd)]), live, out_bits,
               epilogue)
    t1 = builder.add(t, ir.Constant(intp, 1))
    t.add_incoming(ir.Constant(intp, 0), pre)
    t.add_incoming(t1, builder.block)
    for a in range(kh - 1):
        for v in range(nv):
            carried[a][v].add_incoming(zero, pre)
            carried[a][v].add_incoming(sums[a][v], builder.block)
    builder.cbranch(builder.icmp_signed("<", t1, trips), loop, done)
    builder.position_at_end(done)


@cache
def depthwise_strip(kh: int, kw: int, nv: int):
    """`strip(x, plane, height, width, i0, j0, w, w0, d, d0, ldd, oh, cols, bias, lo, hi)`:
    for o < oh and t < cols, d[d0 + o*ldd + t] = clip(bias + the KH x KW taps of w from w0
    over the plane of x at `plane` [height, width], from its pixel (i0 + o, j0 + t)), taps
    outside the plane zero; f32 arrays, oh > 0, 0 < cols <= 16*nv."""

    @intrinsic
    def strip(typingctx, x, plane, height, width, i0, j0, w, w0, d, d0, ldd, oh, cols, bias,
              lo, hi):
        if any(getattr(a, "dtype", None) != types.float32 for a in (x, w, d)) or \
                any(a != types.float32 for a in (bias, lo, hi)):
            return None
        ip, f32 = types.intp, types.float32
        sig = types.void(x, ip, ip, ip, ip, ip, w, ip, d, ip, ip, ip, ip, f32, f32, f32)

        def codegen(context, builder, signature, args):
            xp, wp, dp = (context.make_array(signature.args[i])(context, builder, args[i]).data
                          for i in (0, 6, 8))
            taps = builder.gep(wp, [args[7]])
            weights = [broadcast(builder, builder.load(builder.gep(taps, [ir.Constant(
                args[7].type, k)]))) for k in range(kh * kw)]
            epilogue = [broadcast(builder, a) for a in args[13:]]
            ptrs = builder.gep(xp, [args[1]]), builder.gep(dp, [args[9]])
            _strip(builder, ptrs, (*args[2:6], *args[10:13]), weights, epilogue, (kh, kw, nv))
            return context.get_dummy_value()

        return sig, codegen

    return strip
