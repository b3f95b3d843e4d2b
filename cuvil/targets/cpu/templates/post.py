"""The common epilogue of a convolution or a product, recognised: `clip(gelu?(acc + bias)
+ res)`, a bias per channel, a GELU (exact or tanh), a residual add and a clip (ReLU,
ReLU6, hardtanh), each optional, in that order.

A group whose epilogue is exactly that is lowered to a runtime driver that applies it
(`cuvil.targets.cpu.kernels.conv_post`, `.gemm_post`), nothing generated; any other epilogue is
generated code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from cuvil.lower.physical import layout_perm

CLIPS = {"relu": (0.0, math.inf), "relu6": (0.0, 6.0)}


@dataclass(frozen=True)
class Post:
    """out = clip(gelu?(acc + bias) + res): each part optional."""

    bias: str | None = None  # one value per channel (`match`'s axis): a constant, or any
    # value where `match` was given `computed`
    res: str | None = None  # a value shaped like the output
    lo: float = -math.inf
    hi: float = math.inf
    gelu: str = ""  # a GELU before the residual: "erf" (exact) or "tanh" ("" for none)

    @property
    def clipped(self) -> bool:
        return (self.lo, self.hi) != (-math.inf, math.inf)

    def describe(self) -> str:
        parts = [name for name, v in (("bias", self.bias), (f"GELU ({self.gelu})", self.gelu),
                                      ("residual", self.res)) if v]
        if self.clipped:
            parts.append(f"clip [{self.lo:g}, {self.hi:g}]")
        return " + ".join(parts) or "none"


def match(ctx, seed: str, nodes, out, axis: int, computed: bool = False) -> Post | None:
    """The epilogue `nodes` (in order, from the value `seed`) as a `Post` over the output
    type `out` (plain layout), the bias along `axis` (a constant, or with `computed` any
    contiguous value); None when it is anything else."""
    post, acc, inside = Post(), seed, {seed}
    for node in nodes:
        if acc not in node.inputs or len(node.inputs) != (2 if node.op == "add" else 1):
            return None
        if node.op == "add" and set(node.inputs) <= inside:  # acc + acc, or an earlier acc
            return None
        if post.clipped:  # nothing after the clip
            return None
        if node.op == "add":
            other = node.inputs[1] if node.inputs[0] == acc else node.inputs[0]
            post = _add(ctx, post, other, out, axis, computed)
        elif node.op == "gelu":
            form = {"none": "erf", "tanh": "tanh"}.get(node.attrs.get("approximate", "none"))
            ok = form is not None and post.res is None and not post.gelu
            post = replace(post, gelu=form) if ok else None
        else:
            post = _clip(node, post)
        if post is None:
            return None
        acc = node.name
        inside.add(acc)
    return post


def _add(ctx, post: Post, other: str, out, axis: int, computed: bool) -> Post | None:
    t = ctx.type(other)
    if t.dtype != out.dtype or list(layout_perm(t)) != list(range(t.rank)):
        return None
    shape = (1,) * (out.rank - t.rank) + tuple(t.shape)
    channels = tuple(d if k == axis else 1 for k, d in enumerate(out.shape))
    if post.bias is None and not post.gelu and (computed or ctx.is_const(other)) and \
            shape == channels:
        return replace(post, bias=other)
    if post.res is None and tuple(t.shape) == tuple(out.shape):
        return replace(post, res=other)
    return None


def _clip(node, post: Post) -> Post | None:
    if node.op in CLIPS:
        return replace(post, lo=CLIPS[node.op][0], hi=CLIPS[node.op][1])
    if node.op == "hardtanh":
        return replace(post, lo=float(node.attrs["min_val"]), hi=float(node.attrs["max_val"]))
    return None


def post_args(ctx, post: Post, out) -> tuple[str, str, str]:
    """The drivers' epilogue arguments: the bias as a vector (empty for none; a computed
    one as it is), the residual (an empty array of the output's rank for none), `clip`
    [lo, hi]."""
    dt, name = out.dtype.numpy, out.dtype.value
    if post.bias and not ctx.is_const(post.bias):
        bias = post.bias
    elif post.bias:
        bias = ctx.prepare_from(f"{post.bias}.vector", np.ravel, post.bias)
    else:
        bias = ctx.prepare(f"empty.{name}", np.zeros(0, dt))
    res = post.res or ctx.prepare(f"empty.{out.rank}.{name}", np.zeros((0,) * out.rank, dt))
    clip = ctx.prepare(f"clip.{post.lo}.{post.hi}.{name}", np.array([post.lo, post.hi], dt))
    return bias, res, clip


def geometry_arg(ctx, geo: tuple[int, ...]) -> str:
    """A convolution driver's `geo` argument: the geometry as a shared int64 constant."""
    return ctx.prepare(f"geo.{'.'.join(map(str, geo))}", np.array(geo, np.int64))
