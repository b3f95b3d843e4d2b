"""The common epilogue of a convolution, recognised: `clip(acc + bias + res)`, a bias per
channel, a residual add and a clip (ReLU, ReLU6, hardtanh), each optional, the clip last.

A group whose epilogue is exactly that is lowered to a runtime driver that applies it
(`cuvil.runtime.conv_post`), nothing generated; any other epilogue is generated code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cuvil.lower.physical import layout_perm

CLIPS = {"relu": (0.0, math.inf), "relu6": (0.0, 6.0)}


@dataclass(frozen=True)
class Post:
    bias: str | None = None  # a constant with one value per output channel (axis 1)
    res: str | None = None  # a value shaped like the output
    lo: float = -math.inf
    hi: float = math.inf

    def describe(self) -> str:
        parts = [name for name, v in (("bias", self.bias), ("residual", self.res)) if v]
        if (self.lo, self.hi) != (-math.inf, math.inf):
            parts.append(f"clip [{self.lo:g}, {self.hi:g}]")
        return " + ".join(parts) or "none"


def match(ctx, seed: str, nodes, out) -> Post | None:
    """The epilogue `nodes` (in order, from the value `seed`) as a `Post` over the output
    type `out` (plain layout), or None when it is anything else."""
    post, acc, inside = Post(), seed, {seed}
    for node in nodes:
        if acc not in node.inputs or len(node.inputs) != (2 if node.op == "add" else 1):
            return None
        if node.op == "add" and set(node.inputs) <= inside:  # acc + acc, or an earlier acc
            return None
        if post.lo != -math.inf or post.hi != math.inf:  # nothing after the clip
            return None
        if node.op == "add":
            other = node.inputs[1] if node.inputs[0] == acc else node.inputs[0]
            post = _add(ctx, post, other, out)
        else:
            post = _clip(node, post)
        if post is None:
            return None
        acc = node.name
        inside.add(acc)
    return post


def _add(ctx, post: Post, other: str, out) -> Post | None:
    t = ctx.type(other)
    if t.dtype != out.dtype or list(layout_perm(t)) != list(range(t.rank)):
        return None
    channels = (1,) * (4 - t.rank) + tuple(t.shape) == (1, out.shape[1], 1, 1)
    if post.bias is None and ctx.is_const(other) and t.rank <= 4 and channels:
        return Post(other, post.res)
    if post.res is None and tuple(t.shape) == tuple(out.shape):
        return Post(post.bias, other)
    return None


def _clip(node, post: Post) -> Post | None:
    if node.op in CLIPS:
        return Post(post.bias, post.res, *CLIPS[node.op])
    if node.op == "hardtanh":
        return Post(post.bias, post.res, float(node.attrs["min_val"]),
                    float(node.attrs["max_val"]))
    return None
