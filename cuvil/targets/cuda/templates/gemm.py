"""CUDA GEMM: a tiled `numba.cuda` kernel, 16 x 16 output tiles through shared memory.

`x @ w` with `w` a matrix (every leading dim of `x` is a row), a batched product whose
batch dims are equal, or a vector on either side (a row of `x`, a column of `w`; no
epilogue). Each block of 256 threads computes one tile at a time (grid-stride
over batch x tile rows x tile columns), loading 16 x 16 tiles of both operands into shared
memory and accumulating in the output's dtype. Operands in default layout, floats only;
f16 operands of an f32 product (`widen`) are widened to f32 as the tiles load them.
"""

from __future__ import annotations

from cuvil.ir.types import DType, TensorType
from cuvil.lower.physical import layout_perm, np_name
from cuvil.lower.spec import KernelSpec, Unsupported
from cuvil.targets.cuda.templates import widen
from cuvil.targets.cuda.templates.elementwise import FLOATS, device_text, epilogue

TILE = 16


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
    if x.rank == 1 or w.rank == 1:
        if rest or w.rank > 2:
            raise Unsupported("a matrix-vector product with an epilogue or batched matrices")
        return KernelSpec("gemm", ["xv", "wv", "ov"], [*inputs, group.output],
                          device_text([*_as_matrices(x.rank, w.rank), *_tile_loop(
                              2, False, mm.type.dtype, ["out[q0, col] = acc"], wide)]),
                          parallel=False, fastmath="fast", note=f"tiled {TILE}x{TILE}, a vector")
    params, args, store = _epilogue(ctx, mm, rest, out)
    body = _tile_loop(x.rank, w.rank > 2, mm.type.dtype, store, wide)
    note = f"tiled {TILE}x{TILE}" + (f" + {', '.join(n.op for n in rest)}" if rest else "")
    return KernelSpec("gemm", ["x0", "x1", *params, "out"],
                      [*inputs, *args, group.output], device_text(body),
                      parallel=False, fastmath="fast", note=note)


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


def _tile_loop(rank: int, batched: bool, acc_dtype: DType, store: list[str],
               wide: tuple[bool, bool] = (False, False)) -> list[str]:
    """The kernel body (see the module docstring); `rank` is the output's, `store` writes
    `acc` at (`q0..`, `col`); `wide` says which operands are f16 read into `acc_dtype`."""
    dtype = np_name(acc_dtype)
    w_rank = rank if batched else 2
    if batched:
        rows = f"x0.shape[{rank - 2}]"
        lead = lambda a, r: f"b * {a}.shape[{rank - 2}] + {r}"  # noqa: E731  (dims of a)
        batch = " * ".join(f"x0.shape[{k}]" for k in range(rank - 2)) or "1"
    else:
        rows = " * ".join(f"x0.shape[{k}]" for k in range(rank - 1))
        lead = lambda a, r: r  # noqa: E731
        batch = "1"
    if batched:
        wrow = lambda r: _split("x1", f"b * x1.shape[{rank - 2}] + {r}", rank, "col")  # noqa: E731
    else:
        wrow = lambda r: f"x1[{r}, col]"  # noqa: E731
    zero = f"{dtype}(0)"
    xload = widen.load(_split("x0", lead("x0", "row"), rank, "k0 + tx"), wide[0], acc_dtype)
    wload = widen.load(wrow("k0 + ty"), wide[1], acc_dtype)
    return [
        f"sa = cuda.shared.array(({TILE}, {TILE}), {dtype})",
        f"sb = cuda.shared.array(({TILE}, {TILE}), {dtype})",
        f"tx = cuda.threadIdx.x % {TILE}", f"ty = cuda.threadIdx.x // {TILE}",
        f"m = {rows}", f"k = x0.shape[{rank - 1}]", f"n = x1.shape[{w_rank - 1}]",
        f"tm = (m + {TILE - 1}) // {TILE}", f"tn = (n + {TILE - 1}) // {TILE}",
        "t = cuda.blockIdx.x", f"while t < {batch} * tm * tn:",
        "    b = t // (tm * tn)", "    row = ((t % (tm * tn)) // tn) * 16 + ty",
        "    col = (t % tn) * 16 + tx", f"    acc = {zero}",
        f"    for k0 in range(0, k, {TILE}):",
        f"        sa[ty, tx] = {xload} "
        f"if row < m and k0 + tx < k else {zero}",
        f"        sb[ty, tx] = {wload} "
        f"if k0 + ty < k and col < n else {zero}",
        "        cuda.syncthreads()",
        f"        for kk in range({TILE}):", "            acc += sa[ty, kk] * sb[kk, tx]",
        "        cuda.syncthreads()",
        "    if row < m and col < n:",
        *["        " + ln for ln in [*_leading(lead("out", "row"), rank), *store]],
        "    t += cuda.gridDim.x",
    ]
