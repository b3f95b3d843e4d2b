"""The int8 GEMM's micro-kernel in LLVM IR: a tile of `mr` rows x `nv` vectors of int32
sums, four u8 x s8 products per lane and step along K (`vpdpbusd` where the CPU has VNNI,
plain vector IR otherwise). `cuvil.targets.cpu.kernels.int8` builds its drivers around these tiles.

LLVM 22 (Numba 0.68) never emits `vpdpbusd` from Numba loops, which is why this is IR.
"""

from __future__ import annotations

from functools import cache

import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

PANEL, NARROW = 64, 16  # columns per packed panel; the last panel: a multiple of 16


def target_vnni() -> int:
    """Vector lanes (int32) of the VNNI instruction Numba's target has: 16 (AVX-512
    VNNI), 8 (AVX-VNNI), 0 (none: plain vector IR)."""
    from llvmlite import binding

    if numba.config.CPU_NAME and numba.config.CPU_NAME != "host":
        features = set((numba.config.CPU_FEATURES or "").split(","))
        has = {f.lstrip("+") for f in features if f.startswith("+")}
    else:
        has = {k for k, v in binding.get_host_cpu_features().items() if v}
    if {"avx512vnni", "avx512bw", "avx512vl"} <= has:
        return 16
    return 8 if "avxvnni" in has else 0


VNNI = target_vnni()
LANES = VNNI or 8
WIDE = PANEL if LANES == 16 else NARROW  # columns per tile in a wide panel


def _row_pointers(builder, xp, x_strides, r0, rows, mr):
    """i32* to each of the tile's rows; rows past `rows` repeat the last one."""
    intp = r0.type
    last = builder.sub(rows, ir.Constant(intp, 1))
    out = []
    for r in range(mr):
        rc = ir.Constant(intp, r)
        row = builder.add(r0, builder.select(builder.icmp_signed("<", rc, last), rc, last))
        ptr = builder.gep(xp, [builder.mul(row, x_strides[0])])
        out.append(builder.bitcast(ptr, ir.IntType(32).as_pointer()))
    return out


def _dot4(builder, acc, xb, wv, lanes, vnni):
    """acc[i] += sum_j u8(xb[i])[j] * s8(wv[i])[j], j < 4: vpdpbusd, or its plain IR."""
    vec = acc.type
    if vnni:
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec] * 3),
                                            f"llvm.x86.avx512.vpdpbusd.{32 * lanes}")
        return builder.call(fn, [acc, xb, wv])
    wide, byte = ir.VectorType(ir.IntType(32), 4 * lanes), ir.VectorType(ir.IntType(8), 4 * lanes)
    p = builder.mul(builder.zext(builder.bitcast(xb, byte), wide),
                    builder.sext(builder.bitcast(wv, byte), wide))
    for j in range(4):
        pick = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [4 * i + j for i in range(lanes)])
        acc = builder.add(acc, builder.shuffle_vector(p, p, pick))
    return acc


def _tile_ir(builder, rowp, wbase, kbs, kb, zp, tp, mr, nv, lanes, vnni):
    """The loop over K/4: accumulators live in registers (phis), start at the column
    vectors at `zp` and are stored to `tp` at the end."""
    intp, vec = kb.type, ir.VectorType(ir.IntType(32), lanes)
    pre, zero = builder.block, ir.Constant(vec, None)
    zv = builder.bitcast(zp, vec.as_pointer())
    init = [builder.load(builder.gep(zv, [ir.Constant(intp, v)]), align=4) for v in range(nv)]
    loop, done = builder.append_basic_block("qtile"), builder.append_basic_block("qdone")
    builder.cbranch(builder.icmp_signed(">", kb, ir.Constant(intp, 0)), loop, done)
    builder.position_at_end(loop)
    k = builder.phi(intp)
    accs = [builder.phi(vec) for _ in range(mr * nv)]
    wrow = builder.gep(wbase, [builder.mul(k, kbs)])
    ws = []
    for v in range(nv):
        ptr = builder.gep(wrow, [ir.Constant(intp, 4 * lanes * v)])
        ws.append(builder.load(builder.bitcast(ptr, vec.as_pointer()), align=1))
    new = []
    for r in range(mr):
        xv = builder.load(builder.gep(rowp[r], [k]), align=1)
        undef = ir.Constant(vec, ir.Undefined)
        one = builder.insert_element(undef, xv, ir.Constant(ir.IntType(32), 0))
        xb = builder.shuffle_vector(one, undef, zero)  # four bytes to every lane
        new += [_dot4(builder, accs[r * nv + v], xb, ws[v], lanes, vnni) for v in range(nv)]
    k1 = builder.add(k, ir.Constant(intp, 1))
    k.add_incoming(ir.Constant(intp, 0), pre)
    k.add_incoming(k1, builder.block)
    for i, (a, n) in enumerate(zip(accs, new, strict=True)):
        a.add_incoming(init[i % nv], pre)
        a.add_incoming(n, builder.block)
    builder.cbranch(builder.icmp_signed("<", k1, kb), loop, done)
    builder.position_at_end(done)
    final = []
    for i, n in enumerate(new):
        final.append(builder.phi(vec))
        final[-1].add_incoming(init[i % nv], pre)
        final[-1].add_incoming(n, loop)
    out = builder.bitcast(tp, vec.as_pointer())
    for i, a in enumerate(final):
        builder.store(a, builder.gep(out, [ir.Constant(intp, i)]), align=4)


@cache
def tile_kernel(mr: int, nv: int, lanes: int = LANES, vnni: bool = bool(VNNI)):
    """`tile(x, r0, rows, w, w0, kbs, kb, z, t)`: t[r * nv*lanes + c] (int32) = z[c] + the
    sum over kb steps of 4 along K of x[r0 + r, 4k:4k+4] . w[w0 + k*kbs + 4c : +4], for mr
    rows (rows past `rows` repeat the last one) and nv*lanes columns."""

    @intrinsic
    def tile(typingctx, x, r0, rows, w, w0, kbs, kb, z, t):
        sig = types.void(x, types.intp, types.intp, w, types.intp, types.intp, types.intp, z, t)

        def codegen(context, builder, signature, args):
            xa = context.make_array(signature.args[0])(context, builder, args[0])
            wp = context.make_array(signature.args[3])(context, builder, args[3]).data
            zp = context.make_array(signature.args[7])(context, builder, args[7]).data
            tp = context.make_array(signature.args[8])(context, builder, args[8]).data
            strides = cgutils.unpack_tuple(builder, xa.strides, 2)
            xp = builder.bitcast(xa.data, ir.IntType(8).as_pointer())
            rowp = _row_pointers(builder, xp, strides, args[1], args[2], mr)
            wbase = builder.gep(builder.bitcast(wp, ir.IntType(8).as_pointer()), [args[4]])
            _tile_ir(builder, rowp, wbase, args[5], args[6], zp, tp, mr, nv, lanes, vnni)
            return context.get_dummy_value()

        return sig, codegen

    return tile
