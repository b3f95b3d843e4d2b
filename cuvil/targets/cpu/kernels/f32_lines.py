"""The f32 register tile of `f32_tile` over short lines: image rows of at most 8 pixels,
packed g = 2 or 4 to a vector, and a stride-2 copy for arranging images.

A stride-2 convolution's output rows are short (8 pixels on a 16x16 image, 4 on 8x8): as
vectors of their own they leave half or more of the 16 lanes idle, and im2col spends more
copying than the product costs (the CNN's 16 -> 32 widening layer: 112 us against ONNX
Runtime's ~60). Here vector v of the tile holds lines gv..gv+g-1 in its halves or
quarters, each put there by a masked load from its own place (merged by the load: no
shuffles), so the tile's FMAs run on full vectors; stores are masked per line likewise.

    line_tile_kernel(nv, g)(x, q0, offs, kk, w, w0, wk, wm, d, d0, ldd, rows, width, lines,
                            xv, dv)

computes, for m < rows, line r < lines (r < nv*g) and pixel p < width (width <= 16/g),
d[d0 + m*ldd + r*dv + p] = the sum over k < kk of w[w0 + k*wk + m*wm] *
x[q0 + offs[k] + r*xv + p]: `f32_tile.tile_kernel` with lines in place of vectors.
"""

from __future__ import annotations

from functools import cache

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from cuvil.targets.cpu.kernels.f32_tile import (
    I32,
    LANES,
    MR,
    VEC,
    broadcast,
    emit_tile,
    lane_masks,
    masked_load,
    masked_store,
)

_ALIGN = ir.Constant(I32, 4)


def _line_masks(builder, width, lines, g: int, count: int) -> list:
    """Masks of line slots 0..count-1: slot s = g*v + r owns lanes [r*seg, r*seg + width)
    of vector v if s < lines, none otherwise (seg = 16/g)."""
    intp, seg = width.type, LANES // g
    lanes = ir.Constant(ir.VectorType(intp, LANES), list(range(LANES)))
    masks = []
    for s in range(count):
        first = ir.Constant(intp, (s % g) * seg)
        live = builder.icmp_signed("<", ir.Constant(intp, s), lines)
        end = builder.select(live, builder.add(first, width), first)
        masks.append(builder.and_(builder.icmp_signed(">=", lanes, broadcast(builder, first)),
                                  builder.icmp_signed("<", lanes, broadcast(builder, end))))
    return masks


def _line_io(xv, dv, masks, nv: int, g: int):
    """(load_x, store_row) for lines packed g to a vector. Line r of a vector is loaded
    from (its start - r*seg) with only its own lanes live, merged into the vector by the
    load itself (masked lanes keep the pass-through): no shuffles. Stores mirror that."""
    seg = LANES // g

    def at(builder, base, step, v, r):
        intp = step.type
        place = builder.sub(builder.mul(ir.Constant(intp, v * g + r), step),
                            ir.Constant(intp, r * seg))
        return builder.bitcast(builder.gep(base, [place]), VEC.as_pointer())

    def load_x(builder, xrow):
        load, out = masked_load(builder), []
        for v in range(nv):
            vec = ir.Constant(VEC, None)
            for r in range(g):
                vec = builder.call(load, [at(builder, xrow, xv, v, r), _ALIGN,
                                          masks[v * g + r], vec])
            out.append(vec)
        return out

    def store_row(builder, accs, row, _at):
        store = masked_store(builder)
        for v in range(nv):
            for r in range(g):
                builder.call(store, [accs[v], at(builder, row, dv, v, r), _ALIGN,
                                     masks[v * g + r]])

    return load_x, store_row


@cache
def line_tile_kernel(nv: int, g: int, mr: int = MR):
    """The tile over nv vectors of g lines each (see the module docstring)."""
    if g not in (2, 4):
        raise ValueError(f"line_tile_kernel: {g} lines to a vector (2 or 4)")

    @intrinsic
    def tile(typingctx, x, q0, offs, kk, w, w0, wk, wm, d, d0, ldd, rows, width, lines, xv,
             dv):
        if any(getattr(a, "dtype", None) != types.float32 for a in (x, w, d)):
            return None
        ip = types.intp
        sig = types.void(x, ip, offs, ip, w, ip, ip, ip, d, ip, ip, ip, ip, ip, ip, ip)

        def codegen(context, builder, signature, args):
            def io(builder, args):
                masks = _line_masks(builder, args[12], args[13], g, nv * g)
                return _line_io(args[14], args[15], masks, nv, g)

            emit_tile(context, builder, signature, args, io, mr, nv)
            return context.get_dummy_value()

        return sig, codegen

    return tile


@intrinsic
def copy_every_other(typingctx, dst, d0, src, s0, n):
    """dst[d0 + i] = src[s0 + 2i] for i < n, sixteen at a time (two loads, one shuffle, a
    masked store), reading nothing past src[s0 + 2n - 2]. f32 arrays, not overlapping."""
    if dst.dtype != types.float32 or src.dtype != types.float32:
        return None

    def codegen(context, builder, signature, args):
        out, start, inp, first, count = args
        pointers = [context.make_array(signature.args[i])(context, builder, args[i]).data
                    for i in (0, 2)]
        dst_at, src_at = builder.gep(pointers[0], [start]), builder.gep(pointers[1], [first])
        load, store, intp = masked_load(builder), masked_store(builder), count.type
        evens = ir.Constant(ir.VectorType(I32, LANES), list(range(0, 2 * LANES, 2)))
        zero = ir.Constant(VEC, None)
        pre = builder.block
        loop, done = builder.append_basic_block("every"), builder.append_basic_block("copied")
        builder.cbranch(builder.icmp_signed(">", count, ir.Constant(intp, 0)), loop, done)
        builder.position_at_end(loop)
        i = builder.phi(intp)
        left = builder.sub(count, i)
        reads = lane_masks(builder, builder.sub(builder.add(left, left), ir.Constant(intp, 1)),
                           2)
        src_i = builder.gep(src_at, [builder.add(i, i)])
        halves = [builder.call(load, [builder.bitcast(builder.gep(src_i, [ir.Constant(
            intp, LANES * h)]), VEC.as_pointer()), _ALIGN, reads[h], zero]) for h in (0, 1)]
        builder.call(store, [builder.shuffle_vector(*halves, evens), builder.bitcast(
            builder.gep(dst_at, [i]), VEC.as_pointer()), _ALIGN, lane_masks(builder, left, 1)[0]])
        i1 = builder.add(i, ir.Constant(intp, LANES))
        i.add_incoming(ir.Constant(intp, 0), pre)
        i.add_incoming(i1, builder.block)
        builder.cbranch(builder.icmp_signed("<", i1, count), loop, done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return types.void(dst, types.intp, src, types.intp, types.intp), codegen


@intrinsic
def split_columns(typingctx, dst, d_even, d_odd, src, s0, n):
    """dst[d_even + i] = src[s0 + 2i] and dst[d_odd + i] = src[s0 + 2i + 1], for the n
    values src[s0..s0+n), 32 at a time (two loads, two shuffles, two masked stores): a
    row split into its even and odd columns in one pass. f32 arrays, not overlapping."""
    if dst.dtype != types.float32 or src.dtype != types.float32:
        return None

    def codegen(context, builder, signature, args):
        out, even_at, odd_at, inp, first, count = args
        pointers = [context.make_array(signature.args[i])(context, builder, args[i]).data
                    for i in (0, 3)]
        load, store, intp = masked_load(builder), masked_store(builder), count.type
        lanes = [ir.Constant(ir.VectorType(I32, LANES), list(range(p, 2 * LANES, 2)))
                 for p in (0, 1)]
        one, zero = ir.Constant(intp, 1), ir.Constant(VEC, None)
        pre = builder.block
        loop, done = builder.append_basic_block("split"), builder.append_basic_block("split_done")
        builder.cbranch(builder.icmp_signed(">", count, ir.Constant(intp, 0)), loop, done)
        builder.position_at_end(loop)
        i = builder.phi(intp)  # values done: a multiple of 32
        left, half = builder.sub(count, i), builder.lshr(i, one)
        src_i = builder.gep(pointers[1], [builder.add(first, i)])
        halves = [builder.call(load, [builder.bitcast(builder.gep(src_i, [ir.Constant(
            intp, LANES * h)]), VEC.as_pointer()), _ALIGN, mask, zero])
            for h, mask in enumerate(lane_masks(builder, left, 2))]
        for p, at in enumerate((even_at, odd_at)):  # ceil(left / 2) evens, floor odds
            live = builder.lshr(builder.add(left, ir.Constant(intp, 1 - p)), one)
            builder.call(store, [builder.shuffle_vector(*halves, lanes[p]), builder.bitcast(
                builder.gep(pointers[0], [builder.add(at, half)]), VEC.as_pointer()), _ALIGN,
                lane_masks(builder, live, 1)[0]])
        i1 = builder.add(i, ir.Constant(intp, 2 * LANES))
        i.add_incoming(ir.Constant(intp, 0), pre)
        i.add_incoming(i1, builder.block)
        builder.cbranch(builder.icmp_signed("<", i1, count), loop, done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return types.void(dst, types.intp, types.intp, src, types.intp, types.intp), codegen
