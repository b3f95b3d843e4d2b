"""Kernels of a max pool's training ops, NCHW: `max_pool2d_indices` (where each window's
maximum is) and `max_pool2d_backward` (the gradient added at those places).

Both compute exactly what torch's CPU kernels compute: a window's taps are scanned row by
row from its first tap inside the image, a value replaces the maximum if it is greater or
NaN, and the index starts at the first tap inside the image (a window of `-inf` points
there). Each tap is a select, not a branch (a maximum's place in random data is a branch
mispredicted about once a window). The windows of an output row that lie inside the image
(every window, with static sizes, no padding or dilation and no partial window: the usual
2x2 / 3x3 pools; else the inner ones, the border's scanned) have their taps (up to 16)
written out, the first one the start (the same result: a first tap of `-inf` is where the
index starts, a NaN one is taken), and keep the maximum's tap number as an int32, made an
index in a second loop: those selects vectorize, int64 index selects do not (the zoo CNN's
2x2 pool at batch 32: 0.15 ms a call on one thread, 1.25 with int64 selects). The backward
clears the input gradient, then adds each output's gradient at its index, plane by plane in
output order (so sums of overlapping windows round as torch's do). Planes are split between
threads.

A plane is first scanned with `v > best` alone, noting whether it holds a NaN; only a plane
that does is scanned again with the NaN test in each select.
"""

from __future__ import annotations

from collections.abc import Callable

from cuvil.ir.types import is_static
from cuvil.lower.physical import layout_perm
from cuvil.lower.spec import KernelSpec, Unsupported
from cuvil.ops.nn import pair
from cuvil.targets.cpu.templates.elementwise import literal
from cuvil.targets.cpu.templates.loops import indent

OPS = ("max_pool2d_indices", "max_pool2d_backward")


def generate(node, ctx) -> KernelSpec:
    types = [ctx.type(v) for v in node.inputs] + [node.type]
    if any(list(layout_perm(t)) != list(range(4)) for t in types):
        raise Unsupported(f"{node.op} in a layout other than NCHW")
    geometry = _geometry(node.attrs)
    parallel = ctx.worth_parallel(node.type.shape, geometry[0] * geometry[1])
    if node.op == "max_pool2d_indices":
        body = _indices_inside(geometry) if _inside(geometry, types[0], node.type) \
            else _indices(geometry, types[0].dtype)
        params = ["x0", "out"]
    else:
        body = _backward()
        params = ["g0", "x1", "i2", "out"]
    loop = "prange" if parallel else "range"
    lines = body[0] + [f"for q in {loop}(nq):"] + indent(body[1], 1)
    return KernelSpec("pool", params, [*node.inputs, node.name], lines, parallel)


def _geometry(a) -> tuple[int, ...]:
    (kh, kw), (ph, pw), (dh, dw) = pair(a["kernel_size"]), pair(a["padding"]), \
        pair(a["dilation"])
    sh, sw = pair(a["stride"]) if a["stride"] else (kh, kw)
    return kh, kw, sh, sw, ph, pw, dh, dw


def _take(exact: bool, tap: str = "t", at: str = "at") -> list[str]:
    """Tap `v` (`tap` names it) against the window's maximum so far, `best` at `at`: a
    select; `exact` with torch's NaN rule, else noting a NaN in `nan`."""
    test = ["take = (v > best) | (v != v)"] if exact else ["nan |= v != v", "take = v > best"]
    return [*test, f"{at} = {tap} if take else {at}", "best = v if take else best"]


def _plane(head: list[str], rows: Callable[[bool], list[str]],
           setup: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """The kernel's head and its loop body over plane `q` (after `setup`): the rows
    scanned fast, then exactly again if the plane holds a NaN."""
    return head, ["xq = x[q]", *setup, "nan = False", *rows(False), "if nan:",
                  *indent(rows(True), 1)]


def _inside(geometry: tuple[int, ...], x, out) -> bool:
    """Whether every window lies inside the image (static sizes, no padding or dilation)."""
    kh, kw, sh, sw, ph, pw, dh, dw = geometry
    dims = (*x.shape[2:], *out.shape[2:])
    if not all(is_static(d) for d in dims) or (ph, pw, dh, dw) != (0, 0, 1, 1):
        return False
    h, w, oh, ow = dims
    return (oh - 1) * sh + kh <= h and (ow - 1) * sw + kw <= w and kh * kw <= 16


def _indices_inside(geometry: tuple[int, ...]) -> tuple[list[str], list[str]]:
    """Every window inside the image: each output row's windows coded (`_coded_row`)."""
    kh, kw, sh, sw, *_ = geometry
    head = ["nq = x0.shape[0] * x0.shape[1]", "w = x0.shape[3]", "oh = out.shape[2]",
            "ow = out.shape[3]", "x = x0.reshape((nq, x0.shape[2] * w))",
            "o = out.reshape((nq, oh, ow))"]

    def rows(exact: bool) -> list[str]:
        return ["for i in range(oh):", f"    top = i * {sh} * w", "    orow = o[q, i]",
                *indent(_coded_row(geometry, exact, "0, ow", f"j * {sw}"), 1)]

    return _plane(head, rows, ("codes = np.empty(ow, np.int32)",))


def _coded_row(geometry: tuple[int, ...], exact: bool, columns: str, first: str) -> list[str]:
    """The windows of output row `orow` at `columns` (a range's arguments), each inside
    the image, its first tap at column `first` of the image row starting at index `top`:
    each window's taps written out, the maximum's tap number kept in `codes` (int32: the
    selects vectorize; int64 indices chosen by selects did not), then made indices."""
    kh, kw, *_, dh, dw = geometry
    window = [f"c = {first}", "best = r0[c]", "code = np.int32(0)"]
    window += [] if exact else ["nan |= best != best"]
    for n in range(1, kh * kw):
        a, b = divmod(n, kw)
        window += [f"v = r{a}[c + {b * dw}]", *_take(exact, f"np.int32({n})", "code")]
    rows = [f"r{a} = xq[top + {a * dh} * w:top + {a * dh} * w + w]" for a in range(kh)]
    return rows + [f"for j in range({columns}):", *indent(window + ["codes[j] = code"], 1),
                   f"for j in range({columns}):", "    k = codes[j]",
                   f"    orow[j] = top + {first} + (k // {kw}) * {dh} * w + (k % {kw}) * {dw}"]


def _indices(geometry: tuple[int, ...], dtype) -> tuple[list[str], list[str]]:
    """Windows that may reach past the image: the rows' windows inside it coded
    (`_coded_row`, where they have at most 16 taps), the others scanned tap by tap from
    their first inside it."""
    kh, kw, sh, sw, ph, pw, dh, dw = geometry
    span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    head = ["nq = x0.shape[0] * x0.shape[1]", "h = x0.shape[2]", "w = x0.shape[3]",
            "oh = out.shape[2]", "ow = out.shape[3]", "x = x0.reshape((nq, h * w))",
            "o = out.reshape((nq, oh, ow))",  # rows [ia, ib), columns [ja, jb): inside
            f"ia = {-(-ph // sh)}", f"ib = (h - {span_h} + {ph}) // {sh} + 1",
            f"ja = {-(-pw // sw)}", f"jb = (w - {span_w} + {pw}) // {sw} + 1"]
    coded = kh * kw <= 16
    row = [f"h0 = i * {sh} - {ph}", f"h1 = min(h0 + {span_h}, h)",
           f"inner = {'ia <= i < ib and ja < jb' if coded else 'False'}",
           "while h0 < 0:", f"    h0 += {dh}", "orow = o[q, i]"]

    def rows(exact: bool) -> list[str]:
        window = [
            f"w0 = j * {sw} - {pw}", f"w1 = min(w0 + {span_w}, w)",
            "while w0 < 0:", f"    w0 += {dw}",
            f"best = {literal(float('-inf'), dtype)}", "at = h0 * w + w0",
            f"for hh in range(h0, h1, {dh}):",
            f"    for ww in range(w0, w1, {dw}):",
            "        t = hh * w + ww", "        v = xq[t]",
            *indent(_take(exact), 2), "orow[j] = at"]
        inner = ["if inner:", "    top = h0 * w",
                 *indent(_coded_row(geometry, exact, "ja, jb", f"j * {sw} - {pw}"), 1)] \
            if coded else []
        scan = ["for j in range(ow):", "    if inner and ja <= j < jb:", "        continue",
                *indent(window, 1)]
        return ["for i in range(oh):"] + indent(row + inner + scan, 1)

    return _plane(head, rows, ("codes = np.empty(ow, np.int32)",))


def _backward() -> tuple[list[str], list[str]]:
    head = ["nq = x1.shape[0] * x1.shape[1]", "hw = x1.shape[2] * x1.shape[3]",
            "m = g0.shape[2] * g0.shape[3]", "g = g0.reshape((nq, m))",
            "idx = i2.reshape((nq, m))", "o = out.reshape((nq, hw))"]
    loop = ["for t in range(hw):", "    o[q, t] = 0", "for t in range(m):",
            "    at = idx[q, t]", "    if at >= 0 and at < hw:",
            "        o[q, at] += g[q, t]"]
    return head, loop
