"""The MLP template: two or three products, each layer's epilogue the common one without
GELU (`templates.post`), as one call of a runtime driver (the ops of
`rules/fusion/mlp.cvr`): `runtime.mlp.mlp_post` for a pair, `mlp_head_post` for a pair and
an output layer after it (a classifier head).

The pair's weights must be f32 constants at least a panel wide, which lowering packs into
panels here (shared with the plain products' packing); an output layer's weight is an f32
constant packed as a plain product's. Hidden layers end in a bias and a ReLU and get
planned buffers of their own. Anything else is `Unsupported`, and lowering then splits off
the last layer (`compile._split`): a head becomes a pair and a product, a pair two products.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from cuvil.ir.types import DType
from cuvil.lower.physical import layout_perm
from cuvil.lower.spec import THREADS, KernelSpec, Scratch, Unsupported
from cuvil.targets.cpu.templates.gemm import GEMV_MAX_ROWS, PANEL, packed_weight, panels
from cuvil.targets.cpu.templates.post import match, post_args

FUSED_ROWS = 8  # `runtime.mlp.FUSED_ROWS`: rows up to which both products share a region
PAIR = ["x", "w1", "p1", "bias1", "clip1", "w2", "p2", "bias2", "res2", "clip2", "mode",
        "parts", "hidden", "out"]
HEAD = ["x", "w1", "p1", "bias1", "clip1", "w2", "p2", "bias2", "clip2", "w3", "p3",
        "bias3", "res3", "clip3", "mode", "parts", "hidden", "hidden2", "out"]


def layers(group, ctx) -> list[list]:
    """The group's nodes as its layers (two or three), each a product and its epilogue."""
    nodes = group.node_list(ctx)
    at = [i for i, n in enumerate(nodes) if n.op == "matmul"]
    if len(at) not in (2, 3) or at[0] != 0:
        raise Unsupported("an MLP is two or three products, each with its epilogue")
    found = [nodes[a:b] for a, b in zip(at, [*at[1:], len(nodes)], strict=True)]
    for before, layer in pairwise(found):
        if layer[0].inputs[0] != before[-1].name:
            raise Unsupported("each product of an MLP must read the layer before's result")
    return found


def generate(group, ctx) -> KernelSpec:
    found = layers(group, ctx)
    args, posts, hidden = [found[0][0].inputs[0]], [], []
    for i, layer in enumerate(found):
        post, (bias, res, clip) = _epilogue(ctx, layer)
        w, last = layer[0].inputs[1], i == len(found) - 1
        args += [w, _weight(ctx, layer[0], pair=i < 2), bias, *([res] if last else []), clip]
        posts.append(post)
        if not last:
            if post.res or (post.lo, post.hi) != (0.0, np.inf):
                raise Unsupported("an MLP's hidden layers end in a bias and a ReLU")
            t = ctx.type(layer[-1].name)
            name = f"{group.output}.hidden" + (str(i + 1) if i else "")
            hidden.append(ctx.add_scratch(name, Scratch(DType.f32, tuple(t.shape))))
    mode = ctx.prepare(f"mlp.{GEMV_MAX_ROWS}.{ctx.par_min}.{FUSED_ROWS}",
                       np.array([0, GEMV_MAX_ROWS, ctx.par_min, FUSED_ROWS], np.int64))
    head = len(found) == 3
    return KernelSpec("mlp", HEAD if head else PAIR,
                      [*args, mode, THREADS, *hidden, group.output], [],
                      note=", ".join(f"layer {i + 1} {p.describe()}" for i, p in enumerate(posts)),
                      library="mlp_head_post" if head else "mlp_post",
                      scratch={h: ctx.scratch[h] for h in hidden})


def _epilogue(ctx, layer) -> tuple:
    """A layer's epilogue (`templates.post.Post`) and its drivers' arguments."""
    mm, out = layer[0], ctx.type(layer[-1].name)
    plain = all(list(layout_perm(t)) == list(range(t.rank))
                for t in (ctx.type(mm.inputs[0]), out))
    post = match(ctx, mm.name, layer[1:], out, out.rank - 1) if plain else None
    if post is None or post.gelu or ctx.type(mm.inputs[0]).rank != out.rank:
        raise Unsupported("an MLP's epilogues are a bias, a residual and a clip")
    return post, post_args(ctx, post, out)


def _weight(ctx, mm, pair: bool) -> str:
    """A layer's prepared weight: the pair's as panels, an output layer's as a plain
    product's (`templates.gemm.packed_weight`)."""
    w, t = mm.inputs[1], ctx.type(mm.inputs[1])
    if not ctx.is_const(w) or t.dtype != DType.f32 or t.rank != 2:
        raise Unsupported("an MLP's weights are f32 constants")
    if not pair:
        return packed_weight(ctx, mm)
    if ctx.const_array(w).shape[1] < PANEL:
        raise Unsupported("an MLP pair's weights are a panel wide or more")
    return ctx.prepare_from(f"{w}.panels", panels, w)
