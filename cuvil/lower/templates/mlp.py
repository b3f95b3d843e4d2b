"""The MLP-pair template: two products, the first's epilogue a bias and a ReLU, the
second's the common epilogue without GELU (`templates.post`), as one call of the runtime
driver `runtime.mlp.mlp_post` (the `mlp_relu` ops of `rules/fusion/mlp.cvr`).

Both weights must be f32 constants at least a panel wide, which lowering packs into
panels here (shared with the plain products' packing); the hidden layer gets a planned
buffer of its own, which the driver's two-product path writes. Anything else is
`Unsupported`, and lowering then splits the group into its two layers' products.
"""

from __future__ import annotations

import numpy as np

from cuvil.ir.types import DType
from cuvil.lower.physical import layout_perm
from cuvil.lower.templates.gemm import GEMV_MAX_ROWS, PANEL, panels
from cuvil.lower.templates.post import match, post_args
from cuvil.lower.templates.spec import THREADS, KernelSpec, Scratch, Unsupported

FUSED_ROWS = 8  # `runtime.mlp.FUSED_ROWS`: rows up to which both products share a region
PARAMS = ["x", "w1", "p1", "bias1", "clip1", "w2", "p2", "bias2", "res2", "clip2", "mode",
          "parts", "hidden", "out"]


def layers(group, ctx) -> tuple[list, list]:
    """The group's nodes as its two layers, each a product and then its epilogue."""
    nodes = group.node_list(ctx)
    at = [i for i, n in enumerate(nodes) if n.op == "matmul"]
    if len(at) != 2 or at[0] != 0:
        raise Unsupported("an MLP pair is two products, each with its epilogue")
    first, second = nodes[:at[1]], nodes[at[1]:]
    if second[0].inputs[0] != first[-1].name:
        raise Unsupported("the second product must read the first layer's result")
    return first, second


def generate(group, ctx) -> KernelSpec:
    first, second = layers(group, ctx)
    posts, args = [], [first[0].inputs[0]]
    for layer in (first, second):
        mm, out = layer[0], ctx.type(layer[-1].name)
        _check_weight(ctx, mm.inputs[1])
        plain = all(list(layout_perm(t)) == list(range(t.rank))
                    for t in (ctx.type(mm.inputs[0]), out))
        post = match(ctx, mm.name, layer[1:], out, out.rank - 1) if plain else None
        if post is None or post.gelu or ctx.type(mm.inputs[0]).rank != out.rank:
            raise Unsupported("an MLP pair's epilogues are a bias, a residual and a clip")
        bias, res, clip = post_args(ctx, post, out)
        w = mm.inputs[1]
        args += [w, ctx.prepare(f"{w}.panels", panels(ctx.const_array(w))), bias]
        args += [clip] if layer is first else [res, clip]
        posts.append(post)
    if posts[0].res or (posts[0].lo, posts[0].hi) != (0.0, np.inf):
        raise Unsupported("an MLP pair's hidden layer is a bias and a ReLU")
    hidden_type = ctx.type(first[-1].name)
    hidden = ctx.add_scratch(f"{group.output}.hidden",
                             Scratch(DType.f32, tuple(hidden_type.shape)))
    mode = ctx.prepare(f"mlp.{GEMV_MAX_ROWS}.{ctx.par_min}.{FUSED_ROWS}",
                       np.array([0, GEMV_MAX_ROWS, ctx.par_min, FUSED_ROWS], np.int64))
    return KernelSpec("mlp", PARAMS, [*args, mode, THREADS, hidden, group.output], [],
                      note=f"hidden {posts[0].describe()}, output {posts[1].describe()}",
                      library="mlp_post", scratch={hidden: ctx.scratch[hidden]})


def _check_weight(ctx, w: str) -> None:
    t = ctx.type(w)
    if not ctx.is_const(w) or t.dtype != DType.f32 or t.rank != 2 or \
            ctx.const_array(w).shape[1] < PANEL:
        raise Unsupported("an MLP pair's weights are f32 constants a panel wide or more")
