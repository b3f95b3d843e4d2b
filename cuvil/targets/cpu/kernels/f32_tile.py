"""The f32 micro-kernel in LLVM IR: a tile of `mr` rows x `nv` vectors of 16 columns,
accumulated in registers, for the direct convolution (`kernels.conv_direct`) and the
f32 GEMM (`cuvil.targets.cpu.kernels.sgemm`).

Step k adds, to row m, one broadcast scalar w[w0 + k*wk + m*wm] times one vector per 16
columns, x[q0 + offs[k] + t]: mr x nv FMAs per mr broadcasts and nv loads, the vectors
shared by the rows. The strides and the offset table say what the operands are:

    convolution  rows = output channels (w: the weight [C*KH*KW, OC], wk = OC, wm = 1),
                 columns = output pixels, offs = each tap's place (channel, tap, dilation,
                 stride phase), so one kernel serves every geometry;
    GEMM         rows = rows of a (w: a [M, K], wk = 1, wm = K), columns = columns of b,
                 offs[k] = k * N.

Loads and stores are masked to `cols` columns and the stores to `rows` rows, so tails need
neither padding nor copies. The GEMM's tile (`post_tile_kernel`) stores through an
epilogue, a bias per column, a residual and a clip, while the sums are in registers.
Numba loops over the same sums reach 40-85 GFLOP/s (LLVM does not keep the tile in
registers); this tile reaches ~105 per Zen 4 core, the FMA peak.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from cuvil.runtime.numba_cache import njit

LANES = 16  # f32 lanes per vector (a zmm register; LLVM splits it where AVX-512 is absent)
MR = 8  # output channels per tile
F32, I32 = ir.FloatType(), ir.IntType(32)
VEC = ir.VectorType(F32, LANES)
MASK = ir.VectorType(ir.IntType(1), LANES)


def declare(builder, name: str, ret, args):
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(ret, args), name)


def masked_load(builder):
    return declare(builder, "llvm.masked.load.v16f32.p0", VEC,
                      [VEC.as_pointer(), I32, MASK, VEC])


def masked_store(builder):
    return declare(builder, "llvm.masked.store.v16f32.p0", ir.VoidType(),
                      [VEC, VEC.as_pointer(), I32, MASK])


def clamp(builder, value, lo, hi):
    """value clipped to [lo, hi] (vectors or scalars alike); a NaN stays NaN, as torch's
    clamp and relu keep it."""
    value = builder.select(builder.fcmp_ordered("<", value, lo), lo, value)
    return builder.select(builder.fcmp_ordered(">", value, hi), hi, value)


def lane_masks(builder, cols, nv: int) -> list:
    """Lane masks of the nv vectors: lane l of vector v is live when 16v + l < cols.

    Each is the bit pattern (1 << clamp(cols - 16v, 0, 16)) - 1 read as 16 lanes: a scalar
    shift that LLVM moves into a mask register. A compare of the lane numbers (16 x i64,
    two 512-bit compares) was sunk into the tile's step loop and cost it 15%."""
    intp, i16 = cols.type, ir.IntType(16)
    zero, full = ir.Constant(intp, 0), ir.Constant(intp, LANES)
    out = []
    for v in range(nv):
        left = builder.sub(cols, ir.Constant(intp, LANES * v))
        left = builder.select(builder.icmp_signed("<", left, zero), zero, left)
        left = builder.select(builder.icmp_signed(">", left, full), full, left)
        bits = builder.sub(builder.shl(ir.Constant(intp, 1), left), ir.Constant(intp, 1))
        out.append(builder.bitcast(builder.trunc(bits, i16), ir.VectorType(ir.IntType(1),
                                                                         LANES)))
    return out


def broadcast(builder, value, n: int = LANES):
    """A vector of n copies of a scalar (of any type: floats, indices, bits)."""
    undef = ir.Constant(ir.VectorType(value.type, n), ir.Undefined)
    one = builder.insert_element(undef, value, ir.Constant(I32, 0))
    return builder.shuffle_vector(one, undef, ir.Constant(ir.VectorType(I32, n), None))


def row_operands(builder, wb, wm, rows, mr: int) -> list:
    """Pointers to each row's first broadcast operand; rows past `rows` repeat the last
    one, so that no load reaches past `w`."""
    intp = rows.type
    last = builder.sub(rows, ir.Constant(intp, 1))
    return [builder.gep(wb, [builder.mul(builder.select(
        builder.icmp_signed("<", ir.Constant(intp, m), last), ir.Constant(intp, m), last), wm)])
        for m in range(mr)]


def accumulate(builder, kk, count: int, step, first=None, initial=None) -> list:
    """A loop over first <= k < kk (first: 0) carrying `count` vector accumulators, from
    `initial` (zero); `step(builder, k, accs)` emits one step and gives the new ones.
    Returns them after the loop (`initial` if there was no step)."""
    intp = kk.type
    first = ir.Constant(intp, 0) if first is None else first
    initial = [ir.Constant(VEC, None)] * count if initial is None else initial
    pre = builder.block
    loop, done = builder.append_basic_block("steps"), builder.append_basic_block("summed")
    builder.cbranch(builder.icmp_signed(">", kk, first), loop, done)
    builder.position_at_end(loop)
    k = builder.phi(intp)
    accs = [builder.phi(VEC) for _ in range(count)]
    new = step(builder, k, accs)
    k1 = builder.add(k, ir.Constant(intp, 1))
    k.add_incoming(first, pre)
    k.add_incoming(k1, builder.block)
    for a, n, start in zip(accs, new, initial, strict=True):
        a.add_incoming(start, pre)
        a.add_incoming(n, builder.block)
    builder.cbranch(builder.icmp_signed("<", k1, kk), loop, done)
    builder.position_at_end(done)
    final = [builder.phi(VEC) for _ in new]
    for f, n, start in zip(final, new, initial, strict=True):
        f.add_incoming(start, pre)
        f.add_incoming(n, loop)
    return final


def chained(builder, kk, count: int, step, chains: int) -> list:
    """`accumulate` in `chains` independent sets of sums, step k adding to set k % chains,
    added up after the loop (the last kk % chains steps then go on from that sum). A tile
    of one row has too few sums to hide the FMA's latency: Zen 4 retires two FMAs a cycle
    four cycles after they start, so eight must be in flight; one row of two vectors kept
    it at 32 bytes of weight a cycle."""
    intp = kk.type
    width = ir.Constant(intp, chains)
    rounds = builder.sdiv(kk, width)

    def round_of(builder, j, accs):
        k0 = builder.mul(j, width)
        return [a for c in range(chains) for a in step(
            builder, builder.add(k0, ir.Constant(intp, c)), accs[c * count:(c + 1) * count])]

    sets = accumulate(builder, rounds, chains * count, round_of)
    sums = sets[:count]
    for c in range(1, chains):
        sums = [builder.fadd(s, t) for s, t in zip(sums, sets[c * count:(c + 1) * count],
                                                   strict=True)]
    return accumulate(builder, kk, count, step, builder.mul(rounds, width), sums)


def tile_loop(builder, ptrs, kk, wk, load_x, mr: int, nv: int) -> list:
    """The loop over the kk steps; returns the mr*nv accumulators after it (zero if kk=0).
    Step k's nv vectors are `load_x(builder, xb + offs[k])`, or xb + k * offs where `offs`
    is an integer (a stride, not a table)."""
    xb, op, wcols = ptrs
    fma = declare(builder, "llvm.fma.v16f32", VEC, [VEC] * 3)

    def step(builder, k, accs):
        at_x = builder.mul(k, op) if isinstance(op.type, ir.IntType) else \
            builder.load(builder.gep(op, [k]))
        xs = load_x(builder, builder.gep(xb, [at_x]))
        at, new = builder.mul(k, wk), []
        for m in range(mr):
            wm = broadcast(builder, builder.load(builder.gep(wcols[m], [at])))
            new += [builder.call(fma, [wm, xs[v], accs[m * nv + v]]) for v in range(nv)]
        return new

    chains = min(4, 8 // (mr * nv))  # a small tile: sums in flight (`chained`)
    if chains > 1:
        return chained(builder, kk, mr * nv, step, chains)
    return accumulate(builder, kk, mr * nv, step)


def store_rows(builder, accs, db, ldd, rows, store_row, mr: int, nv: int) -> None:
    """Row m of the tile (its nv accumulators) to db + m*ldd by `store_row(builder, accs,
    row pointer, m*ldd)`, for m < rows."""
    intp = ldd.type
    for m in range(mr):
        live, after = builder.append_basic_block(f"row{m}"), builder.append_basic_block(f"next{m}")
        builder.cbranch(builder.icmp_signed("<", ir.Constant(intp, m), rows), live, after)
        builder.position_at_end(live)
        at = builder.mul(ir.Constant(intp, m), ldd)
        store_row(builder, accs[m * nv:(m + 1) * nv], builder.gep(db, [at]), at)
        builder.branch(after)
        builder.position_at_end(after)


def _strided(builder, base, step, v: int):
    """base + v*step, as a vector pointer."""
    return builder.bitcast(builder.gep(base, [builder.mul(ir.Constant(step.type, v), step)]),
                           VEC.as_pointer())


def _vector_io(xv, dv, masks, nv: int):
    """(load_x, store_row) of the plain tile: vector v at + v*xv / + v*dv, lanes masked."""
    zero, align = ir.Constant(VEC, None), ir.Constant(I32, 4)

    def load_x(builder, xrow):
        load = masked_load(builder)
        return [builder.call(load, [_strided(builder, xrow, xv, v), align, masks[v], zero])
                for v in range(nv)]

    def store_row(builder, accs, row, _at):
        store = masked_store(builder)
        for v in range(nv):
            builder.call(store, [accs[v], _strided(builder, row, dv, v), align, masks[v]])

    return load_x, store_row


def _post_io(builder, masks, nv: int, epilogue):
    """(load_x, store_row) of the tile on contiguous columns whose stores apply the
    epilogue (bias at the tile's first column, residual at its first element, lo, hi,
    flags: `post_tile_kernel`) while the sums are in registers; NaN is kept, as torch's
    clamp and relu keep it."""
    bias, res, lo, hi, flags = epilogue
    intp, zero, align = flags.type, ir.Constant(VEC, None), ir.Constant(I32, 4)
    sixteen = ir.Constant(intp, LANES)
    load_x, _ = _vector_io(sixteen, sixteen, masks, nv)
    load = masked_load(builder)
    on = [broadcast(builder, builder.icmp_signed("!=", builder.and_(
        flags, ir.Constant(intp, bit)), ir.Constant(intp, 0))) for bit in (1, 2)]
    biases = [builder.call(load, [_strided(builder, bias, sixteen, v), align, builder.and_(
        masks[v], on[0]), zero]) for v in range(nv)]
    low, high = broadcast(builder, lo), broadcast(builder, hi)

    def store_row(builder, accs, row, at):
        store, rrow = masked_store(builder), builder.gep(res, [at])
        for v in range(nv):
            add = builder.call(load, [_strided(builder, rrow, sixteen, v), align,
                                      builder.and_(masks[v], on[1]), zero])
            val = clamp(builder, builder.fadd(builder.fadd(accs[v], biases[v]), add), low, high)
            builder.call(store, [val, _strided(builder, row, sixteen, v), align, masks[v]])

    return load_x, store_row


def emit_tile(context, builder, signature, args, io, mr: int, nv: int) -> None:
    """The tile's code for an intrinsic whose first 12 arguments are `tile_kernel`'s
    (x, q0, offs, kk, w, w0, wk, wm, d, d0, ldd, rows); `io(builder, args)` gives its
    (load_x, store_row)."""
    data = [context.make_array(signature.args[i])(context, builder, args[i]).data
            if isinstance(signature.args[i], types.Array) else args[i] for i in (0, 2, 4, 8)]
    load_x, store_row = io(builder, args)
    wcols = row_operands(builder, builder.gep(data[2], [args[5]]), args[7], args[11], mr)
    ptrs = (builder.gep(data[0], [args[1]]), data[1], wcols)
    accs = tile_loop(builder, ptrs, args[3], args[6], load_x, mr, nv)
    store_rows(builder, accs, builder.gep(data[3], [args[9]]), args[10], args[11], store_row,
               mr, nv)


@cache
def tile_kernel(nv: int, mr: int = MR):
    """`tile(x, q0, offs, kk, w, w0, wk, wm, d, d0, ldd, rows, cols, xv, dv)`: for m < rows,
    vector v < nv and lane l with t = 16v + l < cols, d[d0 + m*ldd + v*dv + l] = the sum
    over k < kk of w[w0 + k*wk + m*wm] * x[q0 + offs[k] + v*xv + l]; 0 < cols <= 16*nv,
    0 < rows <= mr; all arrays f32 but offs, which may also be an integer stride (step k
    at x[q0 + k*offs + ...]). Contiguous columns: xv = dv = 16; vectors
    may also be rows of 16 pixels (xv, dv: the row strides)."""

    @intrinsic
    def tile(typingctx, x, q0, offs, kk, w, w0, wk, wm, d, d0, ldd, rows, cols, xv, dv):
        if any(getattr(a, "dtype", None) != types.float32 for a in (x, w, d)):
            return None
        ip = types.intp
        offs = offs if isinstance(offs, types.Array) else ip
        sig = types.void(x, ip, offs, ip, w, ip, ip, ip, d, ip, ip, ip, ip, ip, ip)

        def codegen(context, builder, signature, args):
            def io(builder, args):
                return _vector_io(args[13], args[14], lane_masks(builder, args[12], nv), nv)

            emit_tile(context, builder, signature, args, io, mr, nv)
            return context.get_dummy_value()

        return sig, codegen

    return tile


def flagged_pointer(builder, flags, bit: int, ptr, fallback):
    """ptr where flags has `bit`, else fallback (memory the tile stores to): the masked
    loads of an absent bias or residual then read no lanes of a valid address. At an
    empty array's address they could reach an unmapped page, which on Intel costs a
    microcode assist per load even with no lane live."""
    on = builder.icmp_signed("!=", builder.and_(flags, ir.Constant(flags.type, bit)),
                             ir.Constant(flags.type, 0))
    return builder.select(on, ptr, fallback)


@njit(nogil=True, inline="always")
def no_epilogue():
    """The epilogue that changes nothing: (bias, residual, lo, hi, flags), both empty, as
    `post_tile_kernel` and the pixel tile (`f32_pixels`) take it."""
    empty = np.empty(0, np.float32)
    return empty, empty, np.float32(-np.inf), np.float32(np.inf), 0


@cache
def post_tile_kernel(nv: int, mr: int = MR):
    """`tile(x, q0, offs, kk, w, w0, wk, wm, d, d0, ldd, rows, cols, b, b0, r, lo, hi,
    flags)`: `tile_kernel(nv, mr)`'s sums on contiguous columns (xv = dv = 16), stored
    through the epilogue d = clip(sum + b[b0 + t] (flags & 1) + r[d0 + m*ldd + t]
    (flags & 2), lo, hi) while they are in registers (`gemm_post.linear_post`'s bias,
    residual and ReLU, without a second pass over d). b and r may be empty when their
    flag is off; f32 arrays but offs."""

    @intrinsic
    def tile(typingctx, x, q0, offs, kk, w, w0, wk, wm, d, d0, ldd, rows, cols, b, b0, r, lo,
             hi, flags):
        if any(getattr(a, "dtype", None) != types.float32 for a in (x, w, d, b, r)):
            return None
        ip, f32 = types.intp, types.float32
        offs = offs if isinstance(offs, types.Array) else ip
        sig = types.void(x, ip, offs, ip, w, ip, ip, ip, d, ip, ip, ip, ip, b, ip, r, f32, f32,
                         ip)

        def codegen(context, builder, signature, args):
            b_data, r_data, d_at = (context.make_array(signature.args[i])(
                context, builder, args[i]).data for i in (13, 15, 8))
            d_at, flags = builder.gep(d_at, [args[9]]), args[18]
            epilogue = (flagged_pointer(builder, flags, 1, builder.gep(b_data, [args[14]]), d_at),
                        flagged_pointer(builder, flags, 2, builder.gep(r_data, [args[9]]), d_at),
                        *args[16:19])

            def io(builder, args):
                return _post_io(builder, lane_masks(builder, args[12], nv), nv, epilogue)

            emit_tile(context, builder, signature, args, io, mr, nv)
            return context.get_dummy_value()

        return sig, codegen

    return tile


@intrinsic
def copy_floats(typingctx, dst, d0, src, s0, n):
    """dst[d0:d0 + n] = src[s0:s0 + n] in masked 16-lane vectors, for the short runs that
    LLVM leaves to scalar code (a row of 16 or 32 pixels is under its vector loop's
    minimum trip count). f32 arrays; the runs must not overlap."""
    if dst.dtype != types.float32 or src.dtype != types.float32:
        return None

    def codegen(context, builder, signature, args):
        out, start, inp, first, count = args
        pointers = [context.make_array(signature.args[i])(context, builder, args[i]).data
                    for i in (0, 2)]
        dst_at, src_at = builder.gep(pointers[0], [start]), builder.gep(pointers[1], [first])
        load, store = masked_load(builder), masked_store(builder)
        intp, pre = count.type, builder.block
        loop, done = builder.append_basic_block("copy"), builder.append_basic_block("copied")
        builder.cbranch(builder.icmp_signed(">", count, ir.Constant(intp, 0)), loop, done)
        builder.position_at_end(loop)
        i = builder.phi(intp)
        mask = lane_masks(builder, builder.sub(count, i), 1)[0]
        vec = builder.call(load, [builder.bitcast(builder.gep(src_at, [i]), VEC.as_pointer()),
                                  ir.Constant(I32, 4), mask, ir.Constant(VEC, None)])
        builder.call(store, [vec, builder.bitcast(builder.gep(dst_at, [i]), VEC.as_pointer()),
                             ir.Constant(I32, 4), mask])
        i1 = builder.add(i, ir.Constant(intp, LANES))
        i.add_incoming(ir.Constant(intp, 0), pre)
        i.add_incoming(i1, builder.block)
        builder.cbranch(builder.icmp_signed("<", i1, count), loop, done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return types.void(dst, types.intp, src, types.intp, types.intp), codegen
