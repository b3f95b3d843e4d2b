"""The 3x3 stride-1 f32 NCHW convolution as Winograd's F(2x2, 3x3): 16 multiplies for
each 2x2 block of outputs and input channel where the direct tile (`conv_direct`) spends
36, the rest additions.

An image is cut in 2x2 output tiles, each reading a 4x4 patch of the padded input:

    V[xi, c, tile] = (B' d B)[xi]   d: the tile's patch of channel c     (`_in_tiles`)
    M[xi] = U[xi]' @ V[xi]          U[xi] [C, OC]: the weight's (G g G')[xi], made at
                                    compile time (`templates.conv_drivers.winograd_weight`)
    out[o, tile] = A' M[:, o, tile] A, then the convolution's epilogue (`_out_tiles`)

with B' = [[1,0,-1,0], [0,1,1,0], [0,-1,1,0], [0,1,0,-1]] and A' = [[1,1,1,0],
[0,1,-1,-1]]. The 16 products run on `f32_tile`'s register tile; the transforms are
16-lane vectors over a row of tiles (up to 16 at a time): the image is first padded with
each row split into its even and odd columns, so that a tile's four columns are four
contiguous runs. The image goes in bands of about `BAND` tiles, so that V and M stay in
cache (without: 16 channels on 64x64 took 270 us, in bands 166). The planes of V and M for
neighbouring xi are `SKEW` floats more than a multiple of 4 KB apart: at exactly 4 KB (16
channels of 64 tiles), the 16 stores of a transform all fell in one L1 set and it ran 9x
slower.

Per image on one thread, against the direct tile: 64 channels on 16x16 112 us against 176,
on 56x56 1.60 ms against 3.08, 128 on 28x28 1.43 against 2.71, 256 on 14x14 1.63 against
5.64 (an AVX-512 Xeon); on this project's machine (Zen 4) 16 channels on 16x16 9.2-9.9 us
against 12.4, but 64 on 8x8 1.01x the direct tile's time and 16 on 8x8 1.33x (the
transforms' vectors are rows of 4 tiles there): lowering takes it from 8 channels and 16
columns (`templates.conv_drivers._winograd_fits`). Output sizes must be even.

`xs`, a thread's scratch, holds the padded image, then V and M of one band
(`scratch_size`).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.extending import intrinsic

from cuvil.runtime.numba_cache import njit
from cuvil.targets.cpu.kernels.f32_lines import split_columns
from cuvil.targets.cpu.kernels.f32_tile import (
    I32,
    LANES,
    MR,
    VEC,
    broadcast,
    clamp,
    lane_masks,
    masked_load,
    masked_store,
    no_epilogue,
    tile_kernel,
)

SKEW = 48  # floats added to the distance between the planes of V (and of M)
BAND = 64  # tiles transformed and multiplied at a time
_T2 = tile_kernel(2)
_ALIGN = ir.Constant(I32, 4)
_ZERO = ir.Constant(VEC, None)


def _pointers(context, builder, signature, args, which):
    return [context.make_array(signature.args[i])(context, builder, args[i]).data
            for i in which]


def _load(builder, base, at, mask):
    return builder.call(masked_load(builder), [builder.bitcast(builder.gep(base, [at]),
                                                               VEC.as_pointer()), _ALIGN, mask,
                                               _ZERO])


def _store(builder, vec, base, at, mask):
    builder.call(masked_store(builder), [vec, builder.bitcast(builder.gep(base, [at]),
                                                              VEC.as_pointer()), _ALIGN, mask])


def _in_tiles_kernel(pair: bool):
    """The input transform of up to 16 tiles (`_in_tiles`); with `pair`, of two rows of 8
    tiles (an image 16 columns wide), lanes 8-15 loaded from the second row's patches by
    masked loads of their own, so that V's stores are whole vectors (half-empty ones took
    as long as whole ones: the transform is store-bound)."""

    @intrinsic
    def in_tiles(typingctx, p, p0, half, v, v0, vs, n):
        if p.dtype != types.float32 or v.dtype != types.float32:
            return None
        ip = types.intp

        def codegen(context, builder, signature, args):
            pb, vb = _pointers(context, builder, signature, args, (0, 3))
            p0, half, v0, vs, n = (args[i] for i in (1, 2, 4, 5, 6))
            mask, one = lane_masks(builder, n, 1)[0], ir.Constant(half.type, 1)
            row = builder.add(half, half)
            load = _loader(builder, pb, mask, builder.sub(builder.add(row, row), ir.Constant(
                half.type, LANES // 2)) if pair else None)
            d = []  # d[r][s]: patch row r, column s (even j, odd j, even j+1, odd j+1)
            for r in range(4):
                at = builder.add(p0, builder.mul(ir.Constant(half.type, r), row))
                cols = (at, builder.add(at, half))
                d.append([load(builder.add(cols[s % 2], one) if s > 1 else cols[s])
                          for s in range(4)])
            for r, t in enumerate(_b_transpose(builder, d)):  # then each row times B
                for s, (value,) in enumerate(_b_transpose(builder, [[x] for x in t])):
                    at = builder.add(v0, builder.mul(ir.Constant(vs.type, 4 * r + s), vs))
                    _store(builder, value, vb, at, mask)
            return context.get_dummy_value()

        return types.void(p, ip, ip, v, ip, ip, ip), codegen

    return in_tiles


def _loader(builder, base, mask, jump):
    """Masked loads of n lanes at base[at + lane]; with `jump`, lanes 8.. come from
    base[at + jump + lane] instead (the next row of tiles)."""
    if jump is None:
        return lambda at: _load(builder, base, at, mask)
    first = lane_masks(builder, ir.Constant(jump.type, LANES // 2), 1)[0]
    rest = builder.xor(mask, builder.and_(mask, first))

    def load(at):
        low = _load(builder, base, at, builder.and_(mask, first))
        return builder.call(masked_load(builder), [builder.bitcast(builder.gep(
            base, [builder.add(at, jump)]), VEC.as_pointer()), _ALIGN, rest, low])

    return load


# V for n <= 16 tiles of a row: their patches start at p[p0 + j] (rows 2*half apart, each
# an even half then an odd half `half` long); xi's values go to v[v0 + xi*vs + j]. Pairs:
# n = 8 or 16 tiles, tiles 8.. from the next row of tiles (p0 + 4*half).
_in_tiles, _in_tile_pairs = _in_tiles_kernel(False), _in_tiles_kernel(True)


def _b_transpose(builder, d: list) -> list:
    """B' d for d's four rows (each a list of vectors): d0 - d2, d1 + d2, d2 - d1, d1 - d3."""
    sub, add = builder.fsub, builder.fadd
    return [[sub(a, c) for a, c in zip(d[0], d[2], strict=True)],
            [add(b, c) for b, c in zip(d[1], d[2], strict=True)],
            [sub(c, b) for b, c in zip(d[1], d[2], strict=True)],
            [sub(b, e) for b, e in zip(d[1], d[3], strict=True)]]


@intrinsic
def _out_tiles(typingctx, m, m0, ms, y, y0, ow, n, step, b, r, lo, hi, flags):
    """Output for n <= 16 tiles of a row: M's values at m[m0 + xi*ms + j] give outputs
    y[y0 + 2j + {0, 1}] and y[y0 + ow + 2j + {0, 1}], plus b, plus the residual r (laid
    out as y) where flags & 2, clipped to [lo, hi]. The outputs of tiles 8.. start at
    y[y0 + step] (16 along a row; 2*ow when they are the next row of tiles)."""
    if any(a.dtype != types.float32 for a in (m, y, r)):
        return None
    ip, f32 = types.intp, types.float32

    def codegen(context, builder, signature, args):
        mb, yb, rb = _pointers(context, builder, signature, args, (0, 3, 9))
        m0, ms, y0, ow, n, step, bias, lo, hi, flags = (args[i] for i in (1, 2, 4, 5, 6, 7, 8,
                                                                           10, 11, 12))
        mask = lane_masks(builder, n, 1)[0]
        mk = [_load(builder, mb, builder.add(m0, builder.mul(ir.Constant(ms.type, k), ms)),
                    mask) for k in range(16)]
        add, sub = builder.fadd, builder.fsub
        s = [add(add(mk[c], mk[4 + c]), mk[8 + c]) for c in range(4)]
        e = [sub(sub(mk[4 + c], mk[8 + c]), mk[12 + c]) for c in range(4)]
        pairs = [(add(add(t[0], t[1]), t[2]), sub(sub(t[1], t[2]), t[3])) for t in (s, e)]
        stores = lane_masks(builder, builder.add(n, n), 2)
        has_res = builder.icmp_signed("!=", builder.and_(flags, ir.Constant(flags.type, 2)),
                                      ir.Constant(flags.type, 0))
        bias_v, low, high = (broadcast(builder, x) for x in (bias, lo, hi))
        for row, (even, odd) in enumerate(pairs):
            at = builder.add(y0, ow) if row else y0
            for h in range(2):
                lanes = [i // 2 + 8 * h + (LANES if i % 2 else 0) for i in range(LANES)]
                vec = add(builder.shuffle_vector(even, odd, ir.Constant(
                    ir.VectorType(I32, LANES), lanes)), bias_v)
                place = builder.add(at, step) if h else at
                live = builder.and_(stores[h], broadcast(builder, has_res))
                vec = add(vec, _load(builder, rb, place, live))
                _store(builder, clamp(builder, vec, low, high), yb, place, stores[h])
        return context.get_dummy_value()

    return types.void(m, ip, ip, y, ip, ip, ip, ip, f32, r, f32, f32, ip), codegen


@njit(nogil=True, inline="always")
def band_rows(th: int, tw: int) -> int:
    """Tile rows per band: about `BAND` tiles, so that a band's V and M stay in cache."""
    return min(th, max(1, BAND // tw))


@njit(nogil=True)
def scratch_size(ch: int, oc: int, oh: int, ow: int) -> int:
    """Floats of one thread's scratch: the padded image, then V and M of one band."""
    th, tw = oh // 2, ow // 2
    tiles = band_rows(th, tw) * tw
    return ch * (oh + 2) * (ow + 2) + 16 * (ch * tiles + SKEW) + 16 * (oc * tiles + SKEW)


@njit(nogil=True)
def _check_scratch(x, y, row):
    """Refuse a scratch row shorter than `scratch_size` (lowering sizes it)."""
    if row < scratch_size(x.shape[0], y.shape[0], y.shape[1], y.shape[2]):
        raise ValueError("winograd_image: scratch too small")


@njit(nogil=True, fastmath=True)
def _pad(x, p, ph, pw, hp, half, zero, i0, i1):
    """p [C, hp, 2, half]: x's rows i0 <= i < i1 zero-padded, each row split into its even
    and odd columns (`split_columns`). `zero`: clear p first; without, p must hold an image
    of the same shape padded the same way (its zeros are where every such image has
    them)."""
    ch, h, w = x.shape
    xf = x.reshape(x.size)
    if zero:
        p[:ch * hp * 2 * half] = 0
    even = (pw & 1) * half + (pw >> 1)  # where x's even columns start in a padded row
    odd = ((pw + 1) & 1) * half + ((pw + 1) >> 1)
    for c in range(ch):
        for i in range(i0, i1):
            row = (c * hp + i + ph) * 2 * half
            split_columns(p, row + even, row + odd, xf, (c * h + i) * w, w)


@njit(nogil=True)
def _band_in(p, v, vs, hp, tw, band, i0, rows):
    """V of tile rows i0..i0+rows from the padded image p (`_pad`); channel c's tiles
    at v[c * band + ...] in each plane."""
    ch, half = (vs - SKEW) // band, tw + 1
    for c in range(ch):
        if 2 * tw == LANES:  # two rows of tiles to a vector
            for i in range(0, rows, 2):
                _in_tile_pairs(p, (c * hp + 2 * (i0 + i)) * 2 * half, half, v,
                               c * band + i * tw, vs, min(2, rows - i) * tw)
            continue
        for i in range(rows):
            for j0 in range(0, tw, LANES):
                _in_tiles(p, (c * hp + 2 * (i0 + i)) * 2 * half + j0, half, v,
                          c * band + i * tw + j0, vs, min(LANES, tw - j0))


@njit(nogil=True, fastmath=True)
def _products(v, u, m, offs, vs, ms, band, tiles, xi0, xi1):
    """M[xi] = U[xi]' @ V[xi] over a band's first `tiles` tiles, for xi0 <= xi < xi1."""
    ch, oc = offs.shape[0], u.shape[0] // (16 * offs.shape[0])
    for xi in range(xi0, xi1):
        for t0 in range(0, tiles, 2 * LANES):
            for co in range(0, oc, MR):
                _T2(v, xi * vs + t0, offs, ch, u, xi * ch * oc + co, oc, 1, m,
                    xi * ms + co * band + t0, band, min(MR, oc - co), min(2 * LANES, tiles - t0),
                    LANES, LANES)


@njit(nogil=True)
def _band_out(m, ms, y, epi, tw, band, i0, rows):
    """Rows 2*i0.. of y [OC, OH, OW] from a band's M, with the epilogue epi = (bias,
    residual, lo, hi, flags)."""
    bias, res, lo, hi, flags = epi
    oc, oh, ow = y.shape
    yf = y.reshape(y.size)
    pair = 2 if 2 * tw == LANES else 1  # two rows of tiles to a vector
    step = 2 * ow if pair == 2 else LANES
    for o in range(oc):
        b = bias[o] if flags & 1 else np.float32(0)
        for i in range(0, rows, pair):
            for j0 in range(0, tw, LANES):
                _out_tiles(m, o * band + i * tw + j0, ms, yf, (o * oh + 2 * (i0 + i)) * ow + 2 * j0,
                           ow, min(LANES, min(pair, rows - i) * tw - j0), step, b, res, lo, hi,
                           flags)


@njit(nogil=True)
def band_offsets(ch, oh, ow):
    """Where each channel's tiles start in a plane of V (`_products`' offsets): made once
    a batch, not once an image."""
    tw = ow // 2
    return np.arange(ch) * (band_rows(oh // 2, tw) * tw)


@njit(nogil=True, link=False)
def winograd_rows(x, u, y, xs, geo, epi, offs, zero, r0, r1):
    """Rows of tiles r0 <= i < r1 of one image: there y [OC, OH, OW] = epi(conv3x3(x [C, H,
    W])), u the transformed weight [16 * C * OC], band by band. offs: `band_offsets`;
    zero: clear the scratch first (a thread's first image of a call: the next ones are
    padded into the same places)."""
    ch, oc, th, tw = x.shape[0], y.shape[0], y.shape[1] // 2, y.shape[2] // 2
    hp, half = 2 * th + 2, tw + 1
    rows = band_rows(th, tw)
    band = rows * tw
    padded, vs, ms = ch * hp * 2 * half, ch * band + SKEW, oc * band + SKEW
    _check_scratch(x, y, xs.size)
    ph = geo[4]  # tile row i reads padded rows 2i..2i+3: x's rows 2i-ph..2i+3-ph
    _pad(x, xs, ph, geo[5], hp, half, zero, max(0, 2 * r0 - ph), min(x.shape[1], 2 * r1 + 2 - ph))
    v, m = xs[padded:padded + 16 * vs], xs[padded + 16 * vs:padded + 16 * (vs + ms)]
    for i0 in range(r0, r1, rows):
        r = min(rows, r1 - i0)
        _band_in(xs, v, vs, hp, tw, band, i0, r)
        _products(v, u, m, offs, vs, ms, band, r * tw, 0, 16)
        _band_out(m, ms, y, epi, tw, band, i0, r)


@njit(nogil=True, link=False)
def winograd_image(x, u, y, xs, geo, epi, offs, zero):
    """The whole image on this thread (`winograd_rows`)."""
    winograd_rows(x, u, y, xs, geo, epi, offs, zero, 0, y.shape[1] // 2)


@njit(nogil=True, parallel=True, link=False)
def winograd_split(x, u, y, xs, geo, bias, res, lo, hi, flags, parts, offs, zero):
    """One image's rows of tiles split between `parts` threads (an even share each: rows
    of 8 tiles stay paired), each padding the rows it reads into its own scratch row xs[t]; the
    epilogue `winograd_rows`' epi, given apart (a parallel region takes no tuple of
    arrays). One parallel region an image: splitting each band's products instead made a
    16-channel 16x16 image 3.5x slower on two threads than on one."""
    th = y.shape[1] // 2
    share = (th + parts - 1) // parts
    share += share & 1
    _check_scratch(x, y, xs.shape[1])  # here, not inside the parallel region
    for t in prange(parts):
        winograd_rows(x, u, y, xs[t], geo, (bias, res, lo, hi, flags), offs, zero,
                      min(th, t * share), min(th, (t + 1) * share))


@njit(nogil=True)
def winograd_alone(x, u, y, xs, geo, epi, parts, offs, zero):
    """An image with the threads to itself (fewer images than threads): its rows of tiles
    split between `parts` threads (`winograd_split`), or on this one when parts is 1."""
    if parts > 1:
        bias, res, lo, hi, flags = epi
        winograd_split(x, u, y, xs, geo, bias, res, lo, hi, flags, parts, offs, zero)
    else:
        winograd_image(x, u, y, xs[0], geo, epi, offs, zero)


@njit(nogil=True)
def conv2d_nchw_winograd_image(x, u, out, xs, geo):
    """One image on this thread: out [OC, OH, OW] = conv(x [C, H, W])."""
    offs = band_offsets(x.shape[0], out.shape[1], out.shape[2])
    winograd_image(x, u, out, xs, geo, no_epilogue(), offs, True)


@njit(nogil=True, parallel=True, link=False)
def _images(x, u, out, xs, geo, parts, offs):
    for t in prange(parts):
        for n in range(t, x.shape[0], parts):
            winograd_image(x[n], u, out[n], xs[t], geo, no_epilogue(), offs, n == t)


@njit(nogil=True)
def conv2d_nchw_winograd(x, u, out, xs, geo, parts):
    """The batch: out [N, OC, OH, OW] = conv(x [N, C, H, W]); xs: scratch [threads,
    `scratch_size`]. Images between threads, or each image's rows of tiles split."""
    parts = min(parts, xs.shape[0])
    offs = band_offsets(x.shape[1], out.shape[2], out.shape[3])
    if parts > 1 and x.shape[0] >= parts:
        _images(x, u, out, xs, geo, parts, offs)
        return
    for n in range(x.shape[0]):
        winograd_alone(x[n], u, out[n], xs, geo, no_epilogue(), parts, offs, n == 0)


@njit(nogil=True)
def winograd_weight_of(w):
    """A 3x3 weight [OC, C, 3, 3] known only at the call as U = G g G' [4, 4, C, OC],
    flat, computed in float64 (`templates.conv_drivers.winograd_weight`, for a constant weight):
    G g first, then (G g) G', 84 multiplies for each (OC, C) pair."""
    oc, c = w.shape[0], w.shape[1]
    g = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
    u = np.empty((4, 4, c, oc), w.dtype)
    gg = np.empty((4, 3))
    for o in range(oc):
        for ci in range(c):
            for a in range(4):
                for d in range(3):
                    gg[a, d] = g[a, 0] * w[o, ci, 0, d] + g[a, 1] * w[o, ci, 1, d] + \
                        g[a, 2] * w[o, ci, 2, d]
            for a in range(4):
                for e in range(4):
                    u[a, e, ci, o] = gg[a, 0] * g[e, 0] + gg[a, 1] * g[e, 1] + \
                        gg[a, 2] * g[e, 2]
    return u.reshape(-1)
