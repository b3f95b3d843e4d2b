"""The row template: softmax, log_softmax, layer_norm (its rstd, its input gradient), sum,
mean, amax and var as row kernels.

The input is viewed as `[outer, R, inner]` where `R` spans the reduced dims (which must be
adjacent). With `inner == 1` (the usual last-dim case) each row is contiguous and rows run
in `prange`; otherwise the kernel walks `inner` columns side by side.

A sum, mean or variance over every dim but an adjacent block (batch norm's statistics: all
but the channels of NCHW), and batch norm's weight gradient, view the input as `[A, K, B]`
and reduce A and B for each of the K kept values, in `prange` over K: each contiguous run of
B summed in the input's precision, the runs added in float64; the variance takes a second
pass about the mean.
"""

from __future__ import annotations

import numpy as np

from cuvil.ir.graph import Node
from cuvil.ir.types import DType, is_static
from cuvil.lower.physical import layout_perm, np_name
from cuvil.lower.spec import THREADS, KernelSpec, Unsupported
from cuvil.ops.reduce import norm_dims
from cuvil.targets.cpu.templates.elementwise import literal, math_call
from cuvil.targets.cpu.templates.loops import indent


def reduced_dims(node: Node, rank: int) -> tuple[int, ...]:
    if node.op in ("softmax", "log_softmax"):
        return norm_dims(node.attrs["dim"], rank, node.op)
    if node.op in ("layer_norm", "layer_norm_grad", "layer_norm_rstd"):
        return tuple(range(rank - len(node.attrs["normalized_shape"]), rank))
    if node.op == "batch_norm_weight_grad":
        return tuple(d for d in range(rank) if d != 1)
    return norm_dims(node.attrs["dim"], rank, node.op)


def _keeps_a_block(node: Node, dims: tuple[int, ...], rank: int) -> bool:
    """Whether the reduction keeps a block of dims between reduced ones: dims apart, batch
    norm's weight gradient, a variance over dims that are not the trailing ones."""
    if node.op == "batch_norm_weight_grad":
        return True
    apart = bool(dims) and list(dims) != list(range(dims[0], dims[-1] + 1))
    return apart or node.op == "var" and bool(dims) and dims[-1] < rank - 1


def generate(group, ctx) -> KernelSpec:
    nodes = group.node_list(ctx)
    if len(nodes) != 1:
        raise Unsupported("row kernels take one op")
    node = nodes[0]
    x = ctx.type(node.inputs[0])
    library = _library(node, x, ctx)
    if library is not None:
        return library
    dims = reduced_dims(node, x.rank)
    if _keeps_a_block(node, dims, x.rank):
        return _kept_block(node, x, dims, group, ctx)
    lo, hi = (dims[0], dims[-1] + 1) if dims else (0, 0)
    inner_one = all(is_static(d) and d == 1 for d in x.shape[hi:])
    gen = _ROW if inner_one else _STRIDED
    if node.op not in gen:
        raise Unsupported(f"no row kernel for {node.op}")
    keeps_shape = node.op in ("softmax", "log_softmax", "layer_norm", "layer_norm_grad")
    view = _views(x.rank, lo, hi, inner_one, keeps_shape)
    params, args = ["x0"], [node.inputs[0]]
    if node.op == "layer_norm":
        view += ["w = x1.reshape((rl,))", "b = x2.reshape((rl,))"]
        params += ["x1", "x2"]
        args += list(node.inputs[1:3])
    if node.op == "layer_norm_grad":
        view += ["xv = x1.reshape((nr, rl))", "mu = x2.reshape((nr,))",
                 "rs = x3.reshape((nr,))", "w = x4.reshape((rl,))"]
        params += ["x1", "x2", "x3", "x4"]
        args += list(node.inputs[1:5])
    acc = DType.i64 if node.type.dtype in (DType.i32, DType.i64, DType.bool, DType.u8,
                                           DType.i8) else node.type.dtype
    per_row = gen[node.op](node, acc)
    if any("fr" in ln for ln in per_row):
        view.append(f"fr = {np_name(acc)}(rl)")
    body = ["for r in prange(nr):"] + indent(per_row, 1)
    serial = ["for r in range(nr):"] + indent(per_row, 1)
    parallel = ctx.worth_parallel(x.shape, 3 if keeps_shape else 1)
    lines = view + ([f"if nr * rl * ni < {ctx.par_min} or nr == 1:"] + indent(serial, 1)
                    + ["else:"] + indent(body, 1) if parallel else serial)
    return KernelSpec("rows", [*params, "out"], [*args, group.output], lines, parallel,
                      fastmath="rows")


def _kept_block(node: Node, x, dims: tuple[int, ...], group, ctx) -> KernelSpec:
    """A reduction over every dim but the adjacent block [klo, khi): see the module."""
    kept = [d for d in range(x.rank) if d not in dims]
    if node.op not in _KEPT or not kept or kept != list(range(kept[0], kept[-1] + 1)) or \
            not node.type.dtype.is_float or \
            any(layout_perm(ctx.type(v)) != tuple(range(ctx.type(v).rank))
                for v in (*node.inputs[:2], node.name)):
        raise Unsupported(f"{node.op} over dims {dims}")
    klo, khi = kept[0], kept[-1] + 1
    shape = [f"x0.shape[{i}]" for i in range(x.rank)]
    na, nk, nb = (" * ".join(shape[a:b]) or "1" for a, b in ((0, klo), (klo, khi),
                                                               (khi, x.rank)))
    lines = [f"na = {na}", f"nk = {nk}", f"nb = {nb}", "x = x0.reshape((na, nk, nb))",
             "o = out.reshape((nk,))"]
    params, args = ["x0"], [node.inputs[0]]
    if node.op == "batch_norm_weight_grad":
        lines += ["xv = x1.reshape((na, nk, nb))", "mu = x2.reshape((nk,))",
                  "rs = x3.reshape((nk,))"]
        params, args = ["x0", "x1", "x2", "x3"], list(node.inputs[:4])
    parallel = ctx.worth_parallel(x.shape)
    loop = "prange" if parallel else "range"
    per = _KEPT[node.op](node, node.type.dtype)
    return KernelSpec("rows", [*params, "out"], [*args, group.output],
                      lines + [f"for k in {loop}(nk):"] + indent(per, 1), parallel,
                      fastmath="rows")


def _block_sum(term: str, dtype: DType, into: str = "s") -> list[str]:
    """`into` = the sum of `term` over a and b for this k: each run of b in `dtype`, the
    runs in float64."""
    return [f"{into} = 0.0", "for a in range(na):", f"    r = {literal(0, dtype)}",
            "    for b in range(nb):", f"        r += {term}", f"    {into} += r"]


def _kept_sum(node: Node, dtype: DType) -> list[str]:
    scale = " / (na * nb)" if node.op == "mean" else ""
    return _block_sum("x[a, k, b]", dtype) + [f"o[k] = {np_name(dtype)}(s{scale})"]


def _kept_var(node: Node, dtype: DType) -> list[str]:
    """The mean first, then the squares about it (rounded to `dtype`, as torch's is)."""
    count = f"max(na * nb - {int(node.attrs['correction'])}, 0)"  # none left: inf or NaN
    return (_block_sum("x[a, k, b]", dtype) + [f"m = {np_name(dtype)}(s / (na * nb))"]
            + _block_sum("(x[a, k, b] - m) * (x[a, k, b] - m)", dtype, "v")
            + [f"o[k] = {np_name(dtype)}(v / {count})"])


def _kept_weight_grad(node: Node, dtype: DType) -> list[str]:
    return (["m = mu[k]"] + _block_sum("x[a, k, b] * (xv[a, k, b] - m)", dtype)
            + [f"o[k] = {np_name(dtype)}(s * rs[k])"])


_KEPT = {"sum": _kept_sum, "mean": _kept_sum, "var": _kept_var,
         "batch_norm_weight_grad": _kept_weight_grad}


def _views(rank: int, lo: int, hi: int, inner_one: bool, keeps_shape: bool) -> list[str]:
    """The kernel's first lines: x0 seen as [rows, reduced, inner] (`nr`, `rl`, `ni`; the
    inner dim dropped when it is 1) and `out` as the same, or without the reduced dim."""
    shape = [f"x0.shape[{i}]" for i in range(rank)]

    def prod(ds: list[str]) -> str:
        return " * ".join(ds) or "1"

    view = [f"nr = {prod(shape[:lo])}", f"rl = {prod(shape[lo:hi])}"]
    if inner_one:
        return view + ["ni = 1", "x = x0.reshape((nr, rl))",
                       "o = out.reshape((nr, rl))" if keeps_shape else "o = out.reshape((nr,))"]
    return view + [f"ni = {prod(shape[hi:])}", "x = x0.reshape((nr, rl, ni))",
                   "o = out.reshape((nr, rl, ni))" if keeps_shape else
                   "o = out.reshape((nr, ni))"]


def _library(node: Node, x, ctx) -> KernelSpec | None:
    """A float layer norm of contiguous rows as `runtime.rows.layer_norm_rows` itself."""
    if node.op != "layer_norm" or not x.dtype.is_float or x.dtype == DType.bf16 or \
            any(layout_perm(ctx.type(v)) != tuple(range(ctx.type(v).rank))
                for v in (*node.inputs[:3], node.name)) or \
            any(ctx.type(v).dtype != x.dtype for v in node.inputs[1:3]):
        return None
    eps = ctx.prepare(f"eps.{node.attrs['eps']}", np.array([node.attrs["eps"]], np.float64))
    mode = ctx.prepare(f"rows.{ctx.par_min}", np.array([ctx.par_min], np.int64))
    return KernelSpec("rows", ["x", "w", "b", "eps", "mode", "parts", "out"],
                      [*node.inputs[:3], eps, mode, THREADS, node.name], [],
                      note="layer norm", library="layer_norm_rows")


def _softmax(node: Node, acc: DType) -> list[str]:
    one = literal(1, acc)
    lines = ["m = vmax(x[r])",
             f"s = {literal(0, acc)}", "for j in range(rl):",
             f"    e = {math_call('exp', 'x[r, j] - m', acc)}"]
    if node.op == "softmax":
        return lines + ["    o[r, j] = e", "    s += e", f"inv = {one} / s", "for j in range(rl):",
                        "    o[r, j] *= inv"]
    return lines + ["    s += e", "lse = m + np.log(s)", "for j in range(rl):",
                    "    o[r, j] = x[r, j] - lse"]


def _centred_squares(acc: DType) -> list[str]:
    """Row r's `mean`, then `v`, the sum of squares about it (two passes)."""
    zero = literal(0, acc)
    return [f"s = {zero}", "for j in range(rl):", "    s += x[r, j]", "mean = s / fr",
            f"v = {zero}", "for j in range(rl):", "    d = x[r, j] - mean", "    v += d * d"]


def _row_statistics(node: Node, acc: DType) -> list[str]:
    """Row r's `mean` and `inv` = 1 / sqrt(var + eps), the variance about the mean."""
    eps = literal(node.attrs["eps"], acc)
    return _centred_squares(acc) + [f"inv = {literal(1, acc)} / np.sqrt(v / fr + {eps})"]


def _layer_norm(node: Node, acc: DType) -> list[str]:
    return _row_statistics(node, acc) + [
        "for j in range(rl):", "    o[r, j] = (x[r, j] - mean) * inv * w[j] + b[j]"]


def _layer_norm_rstd(node: Node, acc: DType) -> list[str]:
    return _row_statistics(node, acc) + ["o[r] = inv"]


def _layer_norm_grad(node: Node, acc: DType) -> list[str]:
    """dy's row r (`x`) to dx (`o`), from the row of x (`xv`), its mean and rstd: the two
    means of the catalog's formula in float64, then one pass that writes."""
    return ["m = mu[r]", "s = rs[r]", "a = 0.0", "c = 0.0", "for j in range(rl):",
            "    g = x[r, j] * w[j]", "    a += g", "    c += g * (xv[r, j] - m)",
            "a = a / rl", "c = c * s / rl", "for j in range(rl):",
            "    o[r, j] = s * (x[r, j] * w[j] - a - (xv[r, j] - m) * s * c)"]


def _var(node: Node, acc: DType) -> list[str]:
    """Row r's variance about its mean, over rl - correction (none left: inf or NaN)."""
    return _centred_squares(acc) + [
        f"o[r] = v / max(fr - {int(node.attrs['correction'])}, 0)"]


def _reduce(node: Node, acc: DType) -> list[str]:
    if node.op == "amax":
        return ["o[r] = vamax(x[r])"]
    lines = [f"s = {literal(0, acc)}", "for j in range(rl):", f"    s += {np_name(acc)}(x[r, j])"]
    return lines + (["o[r] = s / fr"] if node.op == "mean" else ["o[r] = s"])


def _reduce_strided(node: Node, acc: DType) -> list[str]:
    first = "x[r, 0, i]" if node.op == "amax" else literal(0, acc)
    step = "vmaximum(x[r, j, i], o[r, i])" if node.op == "amax" else "o[r, i] + x[r, j, i]"
    start = "1" if node.op == "amax" else "0"
    lines = ["for i in range(ni):", f"    o[r, i] = {first}", f"for j in range({start}, rl):",
             "    for i in range(ni):", f"        o[r, i] = {step}"]
    if node.op == "mean":
        lines += ["for i in range(ni):", "    o[r, i] = o[r, i] / fr"]
    return lines


def _softmax_strided(node: Node, acc: DType) -> list[str]:
    lines = ["for i in range(ni):", "    m = x[r, 0, i]", "    for j in range(1, rl):",
             "        m = vmaximum(x[r, j, i], m)", f"    s = {literal(0, acc)}",
             "    for j in range(rl):", f"        s += {math_call('exp', 'x[r, j, i] - m', acc)}"]
    if node.op == "softmax":
        e = math_call("exp", "x[r, j, i] - m", acc)
        lines += ["    for j in range(rl):", f"        o[r, j, i] = {e} / s"]
    else:
        lines += ["    lse = m + np.log(s)", "    for j in range(rl):",
                  "        o[r, j, i] = x[r, j, i] - lse"]
    return lines


_ROW = {"softmax": _softmax, "log_softmax": _softmax, "layer_norm": _layer_norm,
        "layer_norm_grad": _layer_norm_grad, "layer_norm_rstd": _layer_norm_rstd,
        "sum": _reduce, "mean": _reduce, "amax": _reduce, "var": _var}
_STRIDED = {"softmax": _softmax_strided, "log_softmax": _softmax_strided,
            "sum": _reduce_strided, "mean": _reduce_strided, "amax": _reduce_strided}
