"""Block tiles of the CUDA GEMM and implicit-GEMM convolution, chosen by the cost model.

A `Tile` is a block's output tile `bm x bn`, the depth `bk` of the operand slices it stages
in shared memory per step, and each thread's register block `tm x tn` (so a block has
`(bm / tm) * (bn / tn)` threads; thread (ty, tx) owns rows `ty + i * bm / tm` and columns
`tx + j * bn / tn` of the tile, so neighbouring threads store neighbouring columns).

`choose_tile` prices every tile that fits the target's limits (`PARAMS`: static shared
memory a block, threads a block, a whole number of warps) with the cost model's roofline
(`cuvil.egraph.cost.roofline_us`) and takes the cheapest: the flops counted are those of
whole tiles (an edge tile computes its padding too), the bytes those each tile loads
from global memory (larger tiles reload the operands fewer times), and the rate is the
device's scaled by the SMs kept busy (tiles over waves of `sm_count`) and by the register
block's reuse (a step of `tm * tn` multiply-adds loads `tm + tn` values from shared
memory). Small problems thus get small tiles and large ones large tiles.

`staged_product` is the kernel text both templates share: the cooperative loads of the
two slices into shared memory, `syncthreads`, and each thread's multiply-adds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

import sympy

from cuvil.egraph.cost import roofline_us
from cuvil.ir.types import SYMBOLIC_DIM_SIZE, Dim, is_static

EXTENTS = (16, 32, 64, 128)  # the tile's rows and columns tried
DEPTHS = (8, 16, 32)  # its depth
REGISTER_BLOCKS = (1, 2, 4, 8)  # a thread's rows and columns
MAX_ACCUMULATORS = 64  # per thread: more would spill registers


@dataclass(frozen=True)
class Tile:
    bm: int
    bn: int
    bk: int
    tm: int
    tn: int

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    def shared_bytes(self, itemsize: int) -> int:
        return (self.bm * self.bk + self.bk * self.bn) * itemsize

    def launch(self) -> str:
        """The launcher's arguments (`cuda_kernel`): its threads, a block per tile."""
        return f", block={self.threads}, per_block={self.bm * self.bn}"

    def __str__(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}, {self.threads} threads of {self.tm}x{self.tn}"


def candidates(params: dict, itemsize: int) -> list[Tile]:
    """Every tile within the target's limits for operands of `itemsize` bytes."""
    warp, most = params["warp_size"], params["max_threads_per_block"]
    tiles = [Tile(bm, bn, bk, tm, tn) for bm, bn, bk, tm, tn in product(
        EXTENTS, EXTENTS, DEPTHS, REGISTER_BLOCKS, REGISTER_BLOCKS)]
    return [t for t in tiles if t.tm * t.tn <= MAX_ACCUMULATORS and t.threads <= most
            and t.threads % warp == 0 and t.shared_bytes(itemsize) <= params["smem_per_block"]]


def tile_cost(tile: Tile, params: dict, problem: tuple[float, ...], itemsize: int) -> float:
    """Microseconds of the product `problem` = (batch, m, n, k) tiled by `tile` (see the
    module docstring)."""
    batch, m, n, k = problem
    tiles = batch * math.ceil(m / tile.bm) * math.ceil(n / tile.bn)
    flops = 2.0 * tiles * tile.bm * tile.bn * math.ceil(k / tile.bk) * tile.bk
    moved = loaded_bytes(tile, problem, itemsize)
    waves = math.ceil(tiles / params["sm_count"])
    busy = tiles / (waves * params["sm_count"])
    regs = tile.tm * tile.tn
    reuse = regs / (regs + tile.tm + tile.tn)
    return roofline_us({**params, "gflops": params["gflops"] * busy * reuse}, flops, moved)


def loaded_bytes(tile: Tile, problem: tuple[float, ...], itemsize: int) -> float:
    """The bytes the tiles of `problem` read (their slices, padding included) and write."""
    batch, m, n, k = problem
    tiles = batch * math.ceil(m / tile.bm) * math.ceil(n / tile.bn)
    return itemsize * (tiles * (tile.bm + tile.bn) * math.ceil(k / tile.bk) * tile.bk
                       + batch * m * n)


def choose_tile(params: dict, problem: tuple[Dim, ...], itemsize: int) -> Tile:
    """The cheapest tile (`tile_cost`) of `problem` = (batch, m, n, k); a symbolic dim at
    the size the cost model assumes for it. Of tiles that cost the same (a roofline that
    one bound dominates), the one loading fewer bytes, then taking fewer steps (each
    ends in a `syncthreads`), then with fewer threads."""
    sizes = tuple(max(1.0, size(d)) for d in problem)
    return min(candidates(params, itemsize), key=lambda t: (
        tile_cost(t, params, sizes, itemsize), loaded_bytes(t, sizes, itemsize),
        math.ceil(sizes[3] / t.bk), t.threads, (t.bm, t.bn, t.bk, t.tm, t.tn)))


def size(d: Dim) -> float:
    """A dim's size; a symbolic one's at `SYMBOLIC_DIM_SIZE` per symbol."""
    if is_static(d):
        return float(d)
    return float(sympy.sympify(d).subs({s: SYMBOLIC_DIM_SIZE for s in d.free_symbols}))


def staged_product(tile: Tile, dtype: str, load_a: tuple[list[str], str],
                   load_b: tuple[list[str], str]) -> list[str]:
    """Lines accumulating the block's tile into `regs` (`tm x tn`, zeroed first) over the
    depth `k`: `load_a` = (lines setting `ok` and anything the value needs, the value) of
    the left operand at tile row `ar` (global `r0 + ar`) and depth `kk`; `load_b` the same
    of the right one at depth `kk` and tile column `bc` (global `c0 + bc`). Uses `tid`."""
    t, zero = tile, f"{dtype}(0)"
    ry, rx = t.bm // t.tm, t.bn // t.tn
    return [
        f"for mi in range({t.tm}):", f"    for nj in range({t.tn}):",
        f"        regs[mi, nj] = {zero}",
        f"for k0 in range(0, k, {t.bk}):",
        f"    for e in range(tid, {t.bm * t.bk}, {t.threads}):",
        f"        ar = e // {t.bk}", f"        kk = k0 + e % {t.bk}",
        *["        " + ln for ln in load_a[0]],
        f"        sa[ar, e % {t.bk}] = {load_a[1]} if ok else {zero}",
        f"    for e in range(tid, {t.bk * t.bn}, {t.threads}):",
        f"        bc = e % {t.bn}", f"        kk = k0 + e // {t.bn}",
        *["        " + ln for ln in load_b[0]],
        f"        sb[e // {t.bn}, bc] = {load_b[1]} if ok else {zero}",
        "    cuda.syncthreads()",
        f"    for kk in range({t.bk}):", f"        for mi in range({t.tm}):",
        f"            av = sa[ty + mi * {ry}, kk]", f"            for nj in range({t.tn}):",
        f"                regs[mi, nj] += av * sb[kk, tx + nj * {rx}]",
        "    cuda.syncthreads()",
    ]


def shared_arrays(tile: Tile, dtype: str) -> list[str]:
    """The block's two slices, the thread's register block and its place in the tile."""
    rx = tile.bn // tile.tn
    return [f"sa = cuda.shared.array(({tile.bm}, {tile.bk}), {dtype})",
            f"sb = cuda.shared.array(({tile.bk}, {tile.bn}), {dtype})",
            f"regs = cuda.local.array(({tile.tm}, {tile.tn}), {dtype})",
            "tid = cuda.threadIdx.x", f"ty = tid // {rx}", f"tx = tid % {rx}"]


def each_owned(tile: Tile, inner: list[str]) -> list[str]:
    """`inner` at each element the thread owns: `row`, `col` its global place (from the
    tile's `r0`, `c0`), `acc` its value."""
    ry, rx = tile.bm // tile.tm, tile.bn // tile.tn
    return [f"for mi in range({tile.tm}):", f"    row = r0 + ty + mi * {ry}",
            f"    for nj in range({tile.tn}):", f"        col = c0 + tx + nj * {rx}",
            "        acc = regs[mi, nj]", *["        " + ln for ln in inner]]
