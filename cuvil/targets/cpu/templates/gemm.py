"""The GEMM + epilogue template: `matmul`/`bmm`, then the group's elementwise epilogue
(bias, activation, residual add, ...) over the output in the same kernel call.

The product is `kernels.blas.gemm_weight`, writing straight into the planned output,
split between Numba's threads. A constant f32 right-hand side is packed here, at compile
time, into column panels (`panels`) for Cuvil's register tile (`runtime.sgemm`), which
takes products of up to a few hundred rows; larger ones go to scipy's OpenBLAS
(single-threaded per block). One narrower than a panel is kept as its rows too (`narrow`),
which `gemv` reads at batch 1. A constant f64 one is kept transposed for the dot-product
kernel `gemv.gemv` on products with at most `GEMV_MAX_ROWS` rows (batch-1 inference).

A matrix the group transposes for its product alone (the stock `matmul_lt`, `matmul_rt`,
`matmul_tt`, `linear_rt`, `linear_relu_rt`: training graphs' `mm(x, t(w))`, `mm(t(g), x)`)
is passed as it is and read through its `.T` view, which BLAS reads in place.
"""

from __future__ import annotations

import numpy as np

from cuvil.ir.types import DType
from cuvil.lower.group import is_matrix_transpose
from cuvil.lower.physical import layout_perm
from cuvil.lower.spec import THREADS, KernelSpec, Unsupported
from cuvil.ops import registry
from cuvil.targets.cpu.templates.elementwise import ExprBuilder
from cuvil.targets.cpu.templates.loops import emit_loops
from cuvil.targets.cpu.templates.post import match, post_args

BLAS_DTYPES = (DType.f32, DType.f64)
# f64 products with at most this many rows take `gemv.gemv` (784x512 on two threads: 1 row
# 13 us, the f32 tile 39; 4 rows 48 against 44; 8 rows 96 against 48).
GEMV_MAX_ROWS = 3
PANEL = 32  # columns per panel of a packed f32 weight: `runtime.sgemm.WIDTH`


def epilogue(ctx, nodes, out_type, seed: str, first_arg: int):
    """(params, args, lines, parallel): the elementwise `nodes` applied in place to `out`.

    `seed` is the value `out` holds before the epilogue (the GEMM's result). An epilogue
    over a large output gets a parallel loop, like any elementwise kernel would: a fused
    epilogue must never be slower than the separate kernel it replaces (a serial bias +
    ReLU6 over a 1M-element convolution output cost MobileNet 0.4 ms). Each op counts its
    catalog `work` per element (exp/tanh/erf-like ops: 8 adds) in that decision (GPT-2's
    GELU over 512x1024 took 0.7 ms on one thread). Small outputs stay serial: a serial
    kernel compiles in a quarter of the time of a parallel one (0.3 s vs 1.3 s here).
    """
    if not nodes:
        return [], [], [], False
    builder = ExprBuilder(ctx, out_type, {seed: "acc"}, first_arg)
    expr = builder.build(nodes)

    def body(loads, target):
        return [f"acc = {target}"] + expr.body(loads, target)

    work = max(registry.get(n.op).work for n in nodes)
    parallel = ctx.worth_parallel(out_type.shape, work)
    lines = emit_loops(out_type, expr.operands, body, ctx.par_min, parallel=parallel)
    return [op.arg for op in expr.operands], list(expr.args), lines, parallel


def split_heavy(group, ctx, ops: tuple[str, ...]):
    """The group's one GEMM-like node and the elementwise nodes after it."""
    nodes = group.node_list(ctx)
    heavy = [n for n in nodes if n.op in ops]
    if len(heavy) != 1:
        raise Unsupported(f"expected one of {', '.join(ops)} in the group")
    rest = [n for n in nodes if n is not heavy[0]]
    return heavy[0], rest


def generate(group, ctx) -> KernelSpec:
    mm, rest = split_heavy(group, ctx, ("matmul", "bmm"))
    swapped, rest = transposed_inputs(ctx, mm, rest)
    x, y = (ctx.type(i) for i in mm.inputs)
    if x.rank < 2 or y.rank < 2:
        raise Unsupported("matmul of a vector")
    if x.dtype not in BLAS_DTYPES:
        raise Unsupported(f"matmul in {x.dtype} has no BLAS routine")
    out_type = ctx.type(group.output)
    library = _library(mm, rest, ctx, group.output) if y.rank == 2 and not swapped else None
    if library is not None:
        return library
    if y.rank == 2:
        params, args, body = _flat(mm, ctx, x, swapped)
    elif x.shape[:-2] == y.shape[:-2]:
        params, args, body = _batched(mm, x)
    else:
        raise Unsupported("matmul with broadcast batch dims")
    e_params, e_args, e_lines, parallel = epilogue(ctx, rest, out_type, mm.name, len(params))
    return KernelSpec("gemm", [*params, *e_params, "out"], [*args, *e_args, group.output],
                      body + e_lines, parallel=parallel)


def _library(mm, rest, ctx, output: str) -> KernelSpec | None:
    """The kernel as `runtime.gemm_post.linear_post` itself, when the epilogue is the common
    one (`templates.post`): nothing to generate, nothing to compile but once per
    installation."""
    x, out = ctx.type(mm.inputs[0]), ctx.type(output)
    plain = all(list(layout_perm(t)) == list(range(t.rank)) for t in (x, out))
    post = match(ctx, mm.name, rest, out, out.rank - 1) if plain else None
    if post is None or x.rank != out.rank:
        return None
    bias, res, clip = post_args(ctx, post, out)
    packed = packed_weight(ctx, mm)
    gelu = {"": 0, "erf": 1, "tanh": 2}[post.gelu]
    mode = ctx.prepare(f"linear.{gelu}.{GEMV_MAX_ROWS}.{ctx.par_min}",
                       np.array([gelu, GEMV_MAX_ROWS, ctx.par_min], np.int64))
    params = ["x", "w", "packed", "bias", "res", "clip", "mode", "parts", "out"]
    args = [*mm.inputs, packed, bias, res, clip, mode, THREADS, output]
    return KernelSpec("gemm", params, args, [], note=f"epilogue {post.describe()}",
                      library="linear_post")


def panels(w: np.ndarray) -> np.ndarray:
    """A constant weight w [K, N] packed for `runtime.blas.gemm_panels`: [ceil(N / PANEL),
    K, PANEL], the columns past N zero, so that the tile reads each step's columns as one
    contiguous run instead of one row of w each."""
    (k, n), count = w.shape, -(-w.shape[1] // PANEL)
    padded = np.zeros((k, count * PANEL), w.dtype)
    padded[:, :n] = w
    return np.ascontiguousarray(padded.reshape(k, count, PANEL).transpose(1, 0, 2))


def narrow(w: np.ndarray) -> np.ndarray:
    """A constant weight w [K, N] narrower than a panel (a classifier's 10 columns), flat:
    its one panel [K, PANEL], then its rows w.T [N, K] for `gemv.gemv` (`blas._narrow`),
    which at batch 1 reads only the N columns there are."""
    return np.concatenate([panels(w).ravel(), np.ascontiguousarray(w.T).ravel()])


def packed_weight(ctx, mm) -> str:
    """The prepared form of a constant right-hand side for `blas.gemm_weight`: f32 panels
    (and rows too, when narrower than a panel: `narrow`), else the transposed weight for
    `gemv`; an empty array when it is not a constant."""
    w, y = mm.inputs[1], ctx.type(mm.inputs[1])
    if not ctx.is_const(w):
        return ctx.prepare(f"empty2.{y.dtype}", np.zeros((0, 0), y.dtype.numpy))
    if y.dtype == DType.f32 and ctx.const_array(w).shape[1] < PANEL:
        return ctx.prepare_from(f"{w}.narrow", narrow, w)
    if y.dtype == DType.f32:
        return ctx.prepare_from(f"{w}.panels", panels, w)
    return ctx.prepare_from(f"{w}.T", np.transpose, w)


def transposed_inputs(ctx, mm, rest) -> tuple[dict[int, str], list]:
    """({operand position: the matrix it transposes}, the other nodes): the group's members
    that transpose a matrix for the product alone (`lower.group.transposed_operands`,
    from `matmul_lt`/`matmul_rt`), which the kernel reads with swapped strides."""
    swapped = {}
    for node in rest:
        if node.name in mm.inputs and is_matrix_transpose(node, ctx.graph):
            swapped[mm.inputs.index(node.name)] = node.inputs[0]
    if 0 in swapped and ctx.type(mm.inputs[1]).rank != 2:
        raise Unsupported("a transposed left operand of a batched product")
    return swapped, [n for n in rest if n.name not in {mm.inputs[i] for i in swapped}]


def _flat(mm, ctx, x, swapped: dict[int, str]):
    """x [..., M, K] @ y [K, N]: one product over all rows of x; an operand in `swapped`
    is read as the transpose of the matrix named there (a view, `.T`)."""
    if 0 in swapped:
        lines = ["am = x0.T", "kd = am.shape[1]", "mrows = am.shape[0]"]
    else:
        lines = [f"kd = x0.shape[{x.rank - 1}]", f"mrows = {_product('x0', x.rank - 1)}",
                 "am = x0.reshape((mrows, kd))"]
    b = "x1.T" if 1 in swapped else "x1"
    lines += [f"nd = {b}.shape[1]", "cm = out.reshape((mrows, nd))",
              f"gemm_weight(am, {b}, x2, cm, threads, {GEMV_MAX_ROWS})"]
    packed = ctx.prepare(f"empty2.{x.dtype}", np.zeros((0, 0), x.dtype.numpy)) \
        if 1 in swapped else packed_weight(ctx, mm)
    operands = [swapped.get(i, v) for i, v in enumerate(mm.inputs)]
    return ["x0", "x1", "x2", "threads"], [*operands, packed, THREADS], lines


def _batched(mm, x):
    """x [..., M, K] @ y [..., K, N] with equal batch dims: one product per batch entry."""
    r = x.rank
    lines = [f"kd = x0.shape[{r - 1}]", f"md = x0.shape[{r - 2}]", f"nd = x1.shape[{r - 1}]",
             f"nb = {_product('x0', r - 2)}", "a3 = x0.reshape((nb, md, kd))",
             "b3 = x1.reshape((nb, kd, nd))", "c3 = out.reshape((nb, md, nd))",
             "gemm_batched(a3, b3, c3, threads)"]
    return ["x0", "x1", "threads"], [*mm.inputs, THREADS], lines


def _product(array: str, n: int) -> str:
    """The product of the first `n` dims of `array` (not `size // rest`: a dim may be 0)."""
    return " * ".join(f"{array}.shape[{d}]" for d in range(n)) or "1"
