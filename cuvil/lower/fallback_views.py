"""Moves that only torch fallbacks read, passed to them as strided views instead of copied.

A move (a transpose, a permute, a select or slice, and the views between them) is lowered as
one copy of a composed numpy view (`targets.cpu.templates.movement`), because Cuvil's kernels
read row-major memory. A torch op reads any strides: where every reader of a move's value
is a torch fallback (through free views), the fallback gets that numpy view of the source
itself, and nothing is copied; a move that only such moves read is a view too. The encoder
layer's attention reads q, k and v as transposed views of the q/k/v projection, and its
backward the saved q, k, v and output, permuted: torch's attention reads them as eager
passes them.

A move whose value is a graph output stays a copy (an output is memory of its own), as
does a broadcast (`expand`), whose numpy form is made by the copy alone.
"""

from __future__ import annotations

import re

from cuvil.ir.devices import HOST

COPY_PREFIX, COPY_SUFFIX = "copy_into(out, ", ")"


def fallback_views(ctx, groups, specs: dict, outputs: set[str]) -> dict[str, tuple]:
    """{value: (source value, numpy view of `x0`, the symbolic sizes it reads as
    `#sym:` arguments)} for each move group whose value only torch fallbacks read; `x0`
    stands for the source's array, `n_<symbol>` for a size."""
    group_of = {n: g for g in groups for n in g.nodes}
    views: dict[str, tuple] = {}
    for group in reversed(groups):  # readers first: a move read by such a view is one too
        spec = specs.get(id(group))
        view = _copy_view(spec)
        node = ctx.graph[group.output]
        if view is None or group.output in outputs or node.type.device != HOST or \
                any(ctx.graph[n].op == "expand" for n in group.nodes) or \
                not _only_fallbacks_read(group.output, ctx, group_of, views, outputs):
            continue
        views[group.output] = (spec.args[0], view, tuple(spec.args[1:-1]))
    return views


def array_roots(aliases: dict[str, str]) -> dict[str, str]:
    """Each view's array: the value at the end of its chain of views (`aliases`: a view
    -> what it views), for the buffers' lifetimes."""
    roots = {}
    for view in aliases:
        root = view
        while root in aliases and aliases[root] != root:
            root = aliases[root]
        roots[view] = root
    return roots


def view_code(view: str, source_code: str) -> str:
    """The view expression over the source's array code."""
    return re.sub(r"\bx0\b", lambda _: source_code, view)


def _copy_view(spec) -> str | None:
    """The numpy view a movement copy writes (`copy_into(out, <view>)`), or None."""
    if spec is None or spec.template != "copy" or not spec.python or len(spec.body) != 1:
        return None
    body = spec.body[0]
    if not (body.startswith(COPY_PREFIX) and body.endswith(COPY_SUFFIX)):
        return None
    return body[len(COPY_PREFIX):-len(COPY_SUFFIX)]


def _only_fallbacks_read(value: str, ctx, group_of: dict, views: dict,
                         outputs: set[str]) -> bool:
    """Whether every reader of `value`, through free views and the moves in `views`, is a
    torch fallback, and no view of it is a graph output."""
    readers = ctx.users.get(value, [])
    if not readers:
        return False
    for reader in readers:
        group = group_of.get(reader)
        if group is None:
            return False
        if group.output in views:
            continue
        if group.template == "alias":
            if reader in outputs or \
                    not _only_fallbacks_read(reader, ctx, group_of, views, outputs):
                return False
        elif group.template != "fallback" or ctx.graph[group.output].op != "torch_op":
            return False
    return True
