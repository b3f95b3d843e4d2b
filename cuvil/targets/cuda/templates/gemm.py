"""CUDA GEMM: a tiled `numba.cuda` kernel, operand slices staged in shared memory.

`x @ w` with `w` a matrix (every leading dim of `x` is a row), a batched product whose
batch dims are equal, or a vector on either side (a row of `x`, a column of `w`; no
epilogue). The block tile (`bm x bn`, depth `bk`, a `tm x tn` register block a thread) is
the cost model's choice for the problem's shape and the target's limits
(`tiling.choose_tile`; the kernel's note names it). Each block computes one tile at a time
(grid-stride over batch x tile rows x tile columns): its threads load a `bm x bk` slice of
`x` and a `bk x bn` slice of `w` into shared memory together (zeros past the edges),
synchronize, and each accumulates its register block in the output's dtype; the epilogue
runs on each element stored. Operands in default layout, floats only; f16 operands of an
f32 product (`widen`) are widened to f32 as the slices load them.
"""

from __future__ import annotations

import math

from cuvil.ir.types import DType, TensorType
from cuvil.lower.physical import layout_perm, np_name
from cuvil.lower.spec import KernelSpec, Unsupported
from cuvil.targets.cuda import PARAMS
from cuvil.targets.cuda.templates import tiling, widen
from cuvil.targets.cuda.templates.elementwise import FLOATS, device_text, epilogue
from cuvil.targets.cuda.templates.tiling import Tile, each_owned, shared_arrays, staged_product


def generate(group, ctx) -> KernelSpec:
    """The product, then the group's elementwise nodes on each element (the epilogue)."""
    source = widen.sources(group, ctx)
    nodes = group.node_list(ctx)[len(source):]
    if not nodes or nodes[0].op not in ("matmul", "bmm"):
        raise Unsupported("the CUDA GEMM lowers one matmul and what follows it")
    mm, rest = nodes[0], nodes[1:]
    inputs = [source.get(i, i) for i in mm.inputs]
    x, w = (ctx.type(i) for i in inputs)
    wide = tuple(i in source for i in mm.inputs)
    out = nodes[-1].type
    _check(x, w, mm.type)
    if rest and (out.shape != mm.type.shape or layout_perm(out) != tuple(range(out.rank))):
        raise Unsupported("an epilogue that changes the product's shape")
    tile = tiling.choose_tile(PARAMS, _problem(x, w), mm.type.dtype.itemsize)
    if x.rank == 1 or w.rank == 1:
        if rest or w.rank > 2:
            raise Unsupported("a matrix-vector product with an epilogue or batched matrices")
        body = [*_as_matrices(x.rank, w.rank),
                *_tile_loop(2, False, mm.type.dtype, ["out[q0, col] = acc"], tile, wide)]
        return KernelSpec("gemm", ["xv", "wv", "ov"], [*inputs, group.output],
                          device_text(body), parallel=False, fastmath="fast",
                          note=f"tiled {tile}, a vector", launch=tile.launch())
    params, args, store = _epilogue(ctx, mm, rest, out)
    body = _tile_loop(x.rank, w.rank > 2, mm.type.dtype, store, tile, wide)
    note = f"tiled {tile}" + (f" + {', '.join(n.op for n in rest)}" if rest else "")
    return KernelSpec("gemm", ["x0", "x1", *params, "out"],
                      [*inputs, *args, group.output], device_text(body),
                      parallel=False, fastmath="fast", note=note, launch=tile.launch())


def _problem(x: TensorType, w: TensorType) -> tuple:
    """(batch, m, n, k) of `x @ w` (a vector operand as a matrix of one row or column)."""
    n = w.shape[-1] if w.rank > 1 else 1
    if w.rank > 2:
        return (math.prod(x.shape[:-2]), x.shape[-2], n, x.shape[-1])
    return (1, math.prod(x.shape[:-1]), n, x.shape[-1])


def _epilogue(ctx, mm, rest, out: TensorType) -> tuple[list[str], list[str], list[str]]:
    """(params, args, store lines): `out` at the current (`q0..`, `col`) index."""
    index = [f"q{k}" for k in range(out.rank - 1)] + ["col"]
    return epilogue(ctx, mm.name, rest, out, (index, dict(enumerate(index))), 2)


def _as_matrices(x_rank: int, w_rank: int) -> list[str]:
    """`x0`, `x1`, `out` of the parameters `xv`, `wv`, `ov`: a vector operand as a matrix
    (a row of `x`, a column of `w`), `x` as its rows, the output as their product."""
    x = "x0 = xv.reshape((1, xv.shape[0]))" if x_rank == 1 else \
        f"x0 = xv.reshape((xv.size // xv.shape[{x_rank - 1}], xv.shape[{x_rank - 1}]))"
    w = "x1 = wv.reshape((wv.shape[0], 1))" if w_rank == 1 else "x1 = wv"
    return [x, w, "out = ov.reshape((x0.shape[0], x1.shape[1]))"]


def _check(x: TensorType, w: TensorType, out: TensorType) -> None:
    widened = (DType.f16, DType.f32)
    if out.dtype not in FLOATS or \
            any(t.dtype != out.dtype and (t.dtype, out.dtype) != widened for t in (x, w)):
        raise Unsupported("the CUDA GEMM multiplies floats of one dtype (or f16 into f32)")
    if any(layout_perm(t) != tuple(range(t.rank)) for t in (x, w, out)):
        raise Unsupported("the CUDA GEMM reads default layouts")
    if w.rank > 2 and (w.rank != x.rank or tuple(x.shape[:-2]) != tuple(w.shape[:-2])):
        raise Unsupported("batched products with broadcast batch dims")


def _split(name: str, flat: str, rank: int, last: str) -> str:
    """`name[...]` at leading flat index `flat` over its dims `0..rank-2`, then `last`."""
    idx, rest = [], flat
    for k in range(rank - 2, 0, -1):
        idx.insert(0, f"({rest}) % {name}.shape[{k}]")
        rest = f"({rest}) // {name}.shape[{k}]"
    idx.insert(0, rest)
    return f"{name}[{', '.join([*idx, last])}]"


def _leading(flat: str, rank: int) -> list[str]:
    """Lines splitting the flat index over the output's leading dims into `q0..`."""
    lines = [f"f = {flat}"]
    for k in range(rank - 2, 0, -1):
        lines += [f"q{k} = f % out.shape[{k}]", f"f = f // out.shape[{k}]"]
    return lines + ["q0 = f"]


def _tile_loop(rank: int, batched: bool, acc_dtype: DType, store: list[str], tile: Tile,
               wide: tuple[bool, bool] = (False, False)) -> list[str]:
    """The kernel body (see the module docstring); `rank` is the output's, `store` writes
    `acc` at (`q0..`, `col`); `wide` says which operands are f16 read into `acc_dtype`."""
    dtype = np_name(acc_dtype)
    w_rank = rank if batched else 2
    if batched:
        rows = f"x0.shape[{rank - 2}]"
        lead = lambda a, r: f"b * {a}.shape[{rank - 2}] + {r}"  # noqa: E731  (dims of a)
        batch = " * ".join(f"x0.shape[{k}]" for k in range(rank - 2)) or "1"
        w_at = _split("x1", f"b * x1.shape[{rank - 2}] + kk", rank, "c0 + bc")
    else:
        rows = " * ".join(f"x0.shape[{k}]" for k in range(rank - 1))
        lead = lambda a, r: r  # noqa: E731
        batch = "1"
        w_at = "x1[kk, c0 + bc]"
    x_at = widen.load(_split("x0", lead("x0", "r0 + ar"), rank, "kk"), wide[0], acc_dtype)
    w_at = widen.load(w_at, wide[1], acc_dtype)
    bm, bn = tile.bm, tile.bn
    product = staged_product(tile, dtype, (["ok = r0 + ar < m and kk < k"], x_at),
                             (["ok = kk < k and c0 + bc < n"], w_at))
    stored = ["if row < m and col < n:",
              *["    " + ln for ln in [*_leading(lead("out", "row"), rank), *store]]]
    return [
        *shared_arrays(tile, dtype),
        f"m = {rows}", f"k = x0.shape[{rank - 1}]", f"n = x1.shape[{w_rank - 1}]",
        f"tiles_m = (m + {bm - 1}) // {bm}", f"tiles_n = (n + {bn - 1}) // {bn}",
        "t = cuda.blockIdx.x", f"while t < {batch} * tiles_m * tiles_n:",
        "    b = t // (tiles_m * tiles_n)",
        f"    r0 = ((t % (tiles_m * tiles_n)) // tiles_n) * {bm}",
        f"    c0 = (t % tiles_n) * {bn}",
        *["    " + ln for ln in [*product, *each_owned(tile, stored)]],
        "    t += cuda.gridDim.x",
    ]
