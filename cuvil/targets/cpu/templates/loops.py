"""Loop nests over an output array, the shared core of the elementwise-style kernels.

An `Operand` says how each physical dim of an input array is indexed from the output's
logical index: following an output dim (`full`, or `strided` for slices), size-1 and
broadcast (`bcast`), or a constant index (`fixed`, for `select`). Output dims that every
operand treats alike are collapsed into one loop, so a contiguous add of two `[8,128,256]`
arrays is one flat loop and a bias add is `rows x columns`. The outer loops run in `prange`
once the output is large enough to pay for waking the thread pool.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cuvil.ir.types import TensorType
from cuvil.lower.physical import is_one, layout_perm, physical_shape

FULL, STRIDED, BCAST, FIXED = "full", "strided", "bcast", "fixed"


@dataclass(frozen=True)
class Axis:
    kind: str
    out: int | None = None  # the output's logical dim this axis follows (full / strided)
    start: str = "0"  # strided: first index; fixed: the index
    step: int = 1


@dataclass(frozen=True)
class Operand:
    arg: str  # the kernel parameter holding the array
    axes: tuple[Axis, ...]  # one per physical dim of the array


def broadcast_logical(t: TensorType, out: TensorType, lead: int | None = None) -> list[Axis]:
    """Numpy broadcasting of `t` against `out` (right-aligned, or from logical dim `lead`),
    per logical dim of `t`."""
    offset = out.rank - t.rank if lead is None else lead
    logical = []
    for i, d in enumerate(t.shape):
        o = i + offset
        logical.append(Axis(BCAST) if is_one(d) and not is_one(out.shape[o]) else Axis(FULL, o))
    return logical


def broadcast_axes(t: TensorType, out: TensorType, lead: int | None = None) -> tuple[Axis, ...]:
    """`broadcast_logical`, in the physical order of `t`."""
    return mapped_axes(t, broadcast_logical(t, out, lead))


def mapped_axes(t: TensorType, per_logical: list[Axis]) -> tuple[Axis, ...]:
    """Axes given per logical dim of `t`, put in its physical order."""
    return tuple(per_logical[p] for p in layout_perm(t))


def identity_view(rank: int) -> tuple[Axis, ...]:
    """The view of a value indexed exactly as the output is."""
    return tuple(Axis(FULL, i) for i in range(rank))


def compose(inner: list[Axis], outer: tuple[Axis, ...]) -> tuple[Axis, ...]:
    """How an input is indexed from the output, given how it is indexed from its consumer
    (`inner`, per logical dim of the input) and how the consumer is (`outer`, per logical
    dim of the consumer): a slice of a transpose of a slice is one strided load."""
    return tuple(_compose_axis(ax, outer) for ax in inner)


def _compose_axis(ax: Axis, outer: tuple[Axis, ...]) -> Axis:
    if ax.kind in (BCAST, FIXED):
        return ax
    o = outer[ax.out]
    if ax.kind == FULL:
        return o
    if o.kind == BCAST:  # the consumer's dim has size 1: index 0 of it
        return Axis(FIXED, None, ax.start)
    if o.kind == FIXED:
        return Axis(FIXED, None, _affine(ax.start, ax.step, o.start))
    if o.kind == FULL:
        return Axis(STRIDED, o.out, ax.start, ax.step)
    return Axis(STRIDED, o.out, _affine(ax.start, ax.step, o.start), ax.step * o.step)


def _affine(start: str, step: int, index: str) -> str:
    """`start + step * index` as code."""
    scaled = index if step == 1 else f"{step} * ({index})"
    return scaled if start == "0" else f"{start} + {scaled}" if index != "0" else start


class LoopNest:
    """The collapsed iteration space of `out` and the views of every operand."""

    def __init__(self, out: TensorType, operands: list[Operand]):
        self.out, self.operands = out, operands
        perm = layout_perm(out)
        shape = physical_shape(out)
        self.logical_to_phys = {q: p for p, q in enumerate(perm)}
        live = [p for p in range(out.rank) if not is_one(shape[p])]
        self.groups: list[list[int]] = []
        for p in live:
            if self.groups and self._mergeable(self.groups[-1][-1], p):
                self.groups[-1].append(p)
            else:
                self.groups.append([p])
        self.group_of = {p: g for g, ps in enumerate(self.groups) for p in ps}

    def _follow(self, op: Operand, p: int) -> int | None:
        q = layout_perm(self.out)[p]
        for k, ax in enumerate(op.axes):
            if ax.kind in (FULL, STRIDED) and ax.out == q:
                return k
        return None

    def _mergeable(self, a: int, b: int) -> bool:
        for op in self.operands:
            ka, kb = self._follow(op, a), self._follow(op, b)
            if ka is None and kb is None:
                continue
            if ka is None or kb is None or kb <= ka:
                return False
            if op.axes[ka].kind != FULL or op.axes[kb].kind != FULL:
                return False
            if any(op.axes[k].kind != BCAST for k in range(ka + 1, kb)):
                return False
        return True

    # -- code --------------------------------------------------------------------------------
    def size(self, g: int) -> str:
        return " * ".join(f"out.shape[{p}]" for p in self.groups[g])

    def operand_view(self, op: Operand) -> list[tuple[tuple[str, str], int | None]]:
        """((size, index), loop group) per view dim of an operand, in its physical order."""
        dims, seen = [], set()
        for k, ax in enumerate(op.axes):
            if ax.kind == BCAST:
                continue
            if ax.kind == FIXED:
                dims.append(((f"{op.arg}.shape[{k}]", ax.start), None))
                continue
            p = self.logical_to_phys[ax.out]
            if p not in self.group_of:  # follows a size-1 output dim: its first index
                if ax.kind == STRIDED:
                    dims.append(((f"{op.arg}.shape[{k}]", ax.start), None))
                continue
            g = self.group_of[p]
            if ax.kind == STRIDED:
                index = f"i{g}" if ax.step == 1 else f"{ax.step} * i{g}"
                index = index if ax.start == "0" else f"({ax.start} + {index})"
                dims.append(((f"{op.arg}.shape[{k}]", index), g))
            elif g not in seen:
                seen.add(g)
                dims.append(((f"d{g}", f"i{g}"), g))
        return dims


def emit_loops(out: TensorType, operands: list[Operand],
               body: Callable[[dict[str, str], str], list[str]], par_min: int,
               parallel: bool = True) -> list[str]:
    """Lines of a kernel body that compute every element of `out`.

    `body(loads, target)` gets, per operand arg, the expression that loads its element, and
    the expression to assign the result to; it returns the statements of one element.
    """
    nest = LoopNest(out, operands)
    k = len(nest.groups)
    lines = [f"d{g} = {nest.size(g)}" for g in range(k)]
    if k <= 1:
        lines.append("o = out.reshape((1,))" if k == 0 else "o = out.reshape((d0,))")
    else:
        lines.append("nrows = " + " * ".join(f"d{g}" for g in range(k - 1)))
        lines.append(f"o = out.reshape((nrows, d{k - 1}))")
    loads, hoisted, used = _views(nest, operands, lines, k)
    target = "o[0]" if k == 0 else ("o[i0]" if k == 1 else f"o[r, i{k - 1}]")
    element = body(loads, target)
    if k == 0:
        return lines + hoisted + element
    serial = _nest(k, "range", element, used)
    if not parallel:
        return lines + hoisted + serial
    total = "d0" if k == 1 else f"nrows * d{k - 1}"
    return (lines + hoisted + [f"if {total} < {par_min}:"] + indent(serial, 1) + ["else:"]
            + indent(_nest(k, "prange", element, used), 1))


def _views(nest: LoopNest, operands: list[Operand], lines: list[str], k: int):
    """Reshaped views of the operands; their element loads; the outer indices they use."""
    loads, hoisted, used = {}, [], set()
    for op in operands:
        dims = [(size, index, group) for (size, index), group in nest.operand_view(op)]
        if k >= 2 and [g for _, _, g in dims[:k - 1]] == list(range(k - 1)) and all(
                i == f"i{g}" and s == f"d{g}" for s, i, g in dims[:k - 1]):
            dims = [("nrows", "r", None)] + dims[k - 1:]
        if not dims:
            lines.append(f"{op.arg}_ = {op.arg}.reshape((1,))")
            hoisted.append(f"{op.arg}_s = {op.arg}_[0]")
            loads[op.arg] = f"{op.arg}_s"
            continue
        used.update(g for _, _, g in dims if g is not None and g < k - 1)
        lines.append(f"{op.arg}_ = {op.arg}.reshape(({', '.join(s for s, _, _ in dims)},))")
        loads[op.arg] = f"{op.arg}_[{', '.join(i for _, i, _ in dims)}]"
    return loads, hoisted, used


def _nest(k: int, loop: str, element: list[str], used: set[int]) -> list[str]:
    if k == 1:
        return [f"for i0 in {loop}(d0):"] + indent(element, 1)
    decode = []
    for g in sorted(used):  # no reassignment: prange bodies must not rebind names
        stride = " * ".join(f"d{h}" for h in range(g + 1, k - 1))
        index = f"(r // ({stride}))" if stride else "r"
        decode.append(f"i{g} = {index} % d{g}" if g > 0 else f"i0 = {index}")
    inner = [f"for i{k - 1} in range(d{k - 1}):"] + indent(element, 1)
    return [f"for r in {loop}(nrows):"] + indent(decode + inner, 1)


def indent(lines: list[str], levels: int) -> list[str]:
    pad = "    " * levels
    return [pad + ln for ln in lines]


class NotPlain(Exception):
    """An operand that plain indexing at the output's index cannot load (a slice, a select)."""


def plain_loads(expr, index: tuple[str, ...]) -> dict[str, str]:
    """Each operand of `expr` loaded at the output's logical index `index` by plain
    indexing: operands whose axes follow or broadcast against the output's dims."""
    loads = {}
    for op in expr.operands:
        at = []
        for ax in op.axes:
            if ax.kind not in (FULL, BCAST):
                raise NotPlain(ax.kind)
            at.append(index[ax.out] if ax.kind == FULL else "0")
        loads[op.arg] = f"{op.arg}[{', '.join(at)}]" if at else f"{op.arg}[()]"
    return loads
