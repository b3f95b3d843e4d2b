"""The attention template: `softmax(q @ k^T * scale + mask) @ v` per (batch, head) slice.

Lowers `scaled_dot_product_attention` and the same computation written out (a matmul with a
transposed `k`, an elementwise chain of scaling and masking, a last-dim softmax, a second
matmul). Each slice's scores stay in a per-thread scratch tile: two products
(`cuvil.targets.cpu.kernels.blas.gemm`: the f32 register tile, BLAS for f64) around a row loop that
applies the chain and the softmax while the row is in cache. Keys given as rows are
transposed into a per-thread scratch first (the tile reads its right operand's rows).
Slices run in `prange`; the score tensor is never materialized.

An f32 rank-4 attention whose chain is a constant scale, then a mask (boolean or added),
then the causal mask, each optional, is the runtime's `attention_post` instead
(`library`): the same loops compiled once per installation, nothing generated.
"""

from __future__ import annotations

import numpy as np

from cuvil.ir.graph import Graph, Node
from cuvil.ir.types import DType, TensorType, is_static
from cuvil.lower.physical import layout_perm, np_name
from cuvil.lower.spec import THREADS, KernelSpec, Scratch, Unsupported
from cuvil.ops import registry
from cuvil.targets.cpu.templates.elementwise import ExprBuilder, literal, math_call
from cuvil.targets.cpu.templates.gemm import BLAS_DTYPES
from cuvil.targets.cpu.templates.heads import Split, heads_of, stored_view
from cuvil.targets.cpu.templates.loops import BCAST, FIXED, STRIDED, Operand, broadcast_axes, indent

MATMULS = ("matmul", "bmm")


def _in_chain(op: str) -> bool:
    """Ops of the score chain: elementwise ops with a catalog element expression (the row
    loop computes it for each score)."""
    opdef = registry.get(op)
    return opdef.lowering == "elementwise" and bool(opdef.element)


def match(graph: Graph, part, softmax: Node) -> list[str] | None:
    """The nodes of an attention pattern ending in `softmax`'s consumer, or None.

    Lowering asks it of an instance of an op declared `kernel attention` (the family's
    structural check), and of every softmax no instance holds: attention written out by
    the model reaches lowering as plain nodes wherever the `fusion_attention` rules' guards
    refuse it (rank-3 `bmm` products, a scale that is no constant, a score chain other
    than a constant scale and one mask: the zoo's `vit` and `gpt2` reach it so), and those
    rules rewrite to the catalog's `scaled_dot_product_attention`, so no composite instance
    stands for that pattern."""
    found = _pattern(graph, softmax, part.private)
    if found is None:
        return None
    members = [n for n in found if n]
    if any(len(part.group_of[m].nodes) != 1 for m in members):
        return None
    return members


def _pattern(graph: Graph, s: Node, private) -> list[str] | None:
    """[transpose or "", m1, chain..., softmax, dropout or "", m2] by name, or None."""
    r = s.type.rank
    if r < 3 or s.attrs["dim"] not in (-1, r - 1) or s.type.dtype not in BLAS_DTYPES:
        return None
    users = _users(graph)
    after = users.get(s.name, [])
    drop = ""
    if len(after) == 1 and graph[after[0]].op == "dropout" and private(s.name, set(after)):
        drop = after[0]
        after = users.get(drop, [])
    if len(after) != 1 or graph[after[0]].op not in MATMULS:
        return None
    m2 = graph[after[0]]
    if m2.inputs[0] != (drop or s.name) or not private(drop or s.name, {m2.name}):
        return None
    found = _score_chain(graph, s, private)
    if found is None:
        return None
    chain, v, consumer = found
    m1 = graph[v]
    if not private(v, {consumer}):
        return None
    q, kt = (graph[i] for i in m1.inputs)
    vv = graph[m2.inputs[1]]
    batch = s.type.shape[:-2]
    if q.type.shape[:-2] != batch or kt.type.shape[:-2] != batch or vv.type.shape[:-2] != batch:
        return None
    trans = ""
    if kt.op == "transpose" and private(kt.name, {m1.name}) and \
            {a % r for a in (kt.attrs["dim0"], kt.attrs["dim1"])} == {r - 2, r - 1}:
        trans = kt.name
    return [trans, m1.name, *reversed(chain), s.name, drop, m2.name]


def _score_chain(graph: Graph, s: Node, private) -> tuple[list[str], str, str] | None:
    """From softmax `s` back to the first product: (the elementwise ops between them,
    softmax's side first; the product; the op that reads it), or None."""
    chain, v, consumer = [], s.inputs[0], s.name
    while graph[v].op not in MATMULS:
        node = graph[v]
        if not _in_chain(node.op) or node.type.shape != s.type.shape or \
                not private(v, {consumer}):
            return None
        nexts = [i for i in node.inputs if graph[i].type.shape == s.type.shape
                 and (_in_chain(graph[i].op) or graph[i].op in MATMULS)]
        if len(nexts) != 1:
            return None
        chain.append(v)
        consumer, v = v, nexts[0]
    return chain, v, consumer


def _users(graph: Graph) -> dict[str, list[str]]:
    return {k: list(dict.fromkeys(v)) for k, v in graph.users().items()}


def generate(group, ctx) -> KernelSpec:
    return library(group, ctx) or _kernel(ctx, *scores_chain(group, ctx))


def library(group, ctx) -> KernelSpec | None:
    """The kernel as the runtime's `attention_post`, when it computes this group; else
    None."""
    found = library_operands(group.node_list(ctx), ctx.graph)
    if found is None:
        return None
    out, sources, k_rows, mask, scale, divide, causal, inside, qt = found
    q, k, v = (stored_view(ctx, x) for x in sources)
    kind = 0 if mask is None else 1 if ctx.type(mask).dtype is DType.bool else 2
    sl = ctx.type(v).shape[1 if inside & 4 else 2]
    tile = ctx.add_scratch(f"{out}.scores", Scratch(qt.dtype, ("threads", qt.shape[-2], sl)))
    keys = ctx.add_scratch(f"{out}.keys", Scratch(qt.dtype, ("threads", qt.shape[-1], sl))) \
        if k_rows else ctx.prepare("empty.keys.f32", np.zeros((1, 0, 0), np.float32))
    parallel = ctx.worth_parallel((*qt.shape[:-1], sl), 4 * qt.shape[-1])
    mode = np.array([k_rows, divide, kind, causal, parallel, inside,
                     *(x.start for x in sources)], np.int64)
    args = [q, k, v, mask or ctx.prepare("empty.4.f32", np.zeros((0,) * 4, np.float32)),
            ctx.prepare(f"attention.mode.{'.'.join(map(str, mode))}", mode),
            ctx.prepare(f"scale.{scale!r}.f32", np.array([scale], np.float32)), tile, keys,
            THREADS, out]
    return KernelSpec("attention", ["q", "k", "v", "mask", "mode", "scale", "tiles", "keys",
                                    "threads", "out"], args, [],
                      scratch={s: ctx.scratch[s] for s in (tile, keys) if s in ctx.scratch},
                      note="attention rows" + (" (heads in place)" if inside else ""),
                      library="attention_post")


def _plain_mask(mask: TensorType, q: TensorType, sl) -> bool:
    """Whether the mask is an array `attention_post` indexes: [1 or B, 1 or H, 1 or L, S]."""
    if mask.rank != 4 or list(layout_perm(mask)) != [0, 1, 2, 3] or mask.shape[3] != sl:
        return False
    return all(mask.shape[a] in (1, q.shape[a]) for a in range(3)) and \
        mask.dtype in (DType.bool, q.dtype)


def library_operands(nodes: list[Node], graph: Graph) -> tuple | None:
    """(output, [q, k, v] as `heads.Split`s, k in rows, mask or None, scale, divide,
    causal, heads inside, the logical q's type) of an attention group `attention_post`
    computes; else None. Head splits and the merge the group holds (`heads.heads_in_place`)
    are read through: those operands are read in place, and `heads inside` has their bits
    (q 1, k 2, v 4, the output 8)."""
    splits, merge = heads_of(nodes, graph)
    last = nodes[-1]
    core = [n for n in nodes if n.name not in splits.members and not (merge and n is last)]
    found = _core_operands(core, graph)
    if found is None:
        return None
    out, qkv, k_rows, mask, scale, divide, causal = found
    qt, sl = graph[qkv[0]].type, graph[qkv[2]].type.shape[-2]
    inside = sum(bit for bit, x in zip((1, 2, 4), qkv, strict=True) if x in splits)
    if inside & 2 and not k_rows or any(graph[x].type.shape[:-2] != qt.shape[:-2]
                                        for x in qkv):  # one (batch, head) per slice
        return None
    sources = [splits.get(x, Split(x, 0)) for x in qkv]
    out, inside = (last.name, inside | 8) if merge else (out, inside)
    ranks = [(graph[x.root].type, 4 if x.d is None else 3) for x in sources]
    if qt.dtype != DType.f32 or any(t.rank != r or list(layout_perm(t)) != list(range(r))
                                    for t, r in (*ranks, (graph[out].type, 4))):
        return None
    if mask is not None and not _plain_mask(graph[mask].type, qt, sl):
        return None
    return out, sources, k_rows, mask, scale, divide, causal, inside, qt


def _core_operands(nodes: list[Node], graph: Graph) -> tuple | None:
    """(output, [q, k, v], k in rows, mask or None, scale, divide, causal) of SDPA or of
    the pattern written out with a constant scale; else None."""
    if len(nodes) == 1 and nodes[0].op == "scaled_dot_product_attention":
        node, d = nodes[0], graph[nodes[0].inputs[0]].type.shape[-1]
        scale = node.attrs["scale"]
        if scale is None and not is_static(d):
            return None
        scale = 1.0 / d ** 0.5 if scale is None else scale
        mask = node.inputs[3] if len(node.inputs) == 4 else None
        return (node.name, list(node.inputs[:3]), True, mask, scale, False,
                bool(node.attrs["is_causal"]))
    soft = [n for n in nodes if n.op == "softmax"]
    found = _pattern(graph, soft[0], lambda v, c: True) if len(soft) == 1 else None
    if found is None or {n for n in found if n} != {n.name for n in nodes}:
        return None
    trans, m1, *chain, s, drop, m2 = found
    scaled = _scalar_scale(graph, chain, m1)
    if scaled is None:
        return None
    m1n, m2n = graph[m1], graph[m2]
    k = graph[trans].inputs[0] if trans else m1n.inputs[1]
    return (m2, [m1n.inputs[0], k, m2n.inputs[1]], bool(trans), None, *scaled, False)


def _scalar_scale(graph: Graph, chain: list[str], scores: str) -> tuple[float, bool] | None:
    """(scale, divide) of a chain that is one product or quotient of the scores by a
    constant scalar ((1.0, False) for no chain); else None."""
    if not chain:
        return 1.0, False
    node = graph[chain[0]]
    if len(chain) != 1 or node.op not in ("mul", "div") or len(node.inputs) != 2:
        return None
    other = [i for i in node.inputs if i != scores]
    if len(other) != 1 or graph[other[0]].op != "scalar" or \
            (node.op == "div" and node.inputs[0] != scores):
        return None
    return float(graph[other[0]].attrs["value"]), node.op == "div"


def scores_chain(group, ctx) -> tuple:
    """What an attention kernel computes, for this target and others (the CUDA one):
    (output, [q, k, v], whether k is in rows (k^T is read), the scores' type, the chain's
    operands, their args, its lines from `acc` (a score), its result, whether the lines
    hold `LOAD0`, the first operand's load)."""
    nodes = group.node_list(ctx)
    if len(nodes) == 1 and nodes[0].op == "scaled_dot_product_attention":
        return _sdpa(nodes[0], ctx)
    soft = [n for n in nodes if n.op == "softmax"]
    found = _pattern(ctx.graph, soft[0], lambda v, c: True) if len(soft) == 1 else None
    if found is None or {n for n in found if n} != {n.name for n in nodes}:
        raise Unsupported("not an attention pattern")
    trans, m1, *chain, s, drop, m2 = found
    m1n, m2n = ctx.graph[m1], ctx.graph[m2]
    k = ctx.graph[trans].inputs[0] if trans else m1n.inputs[1]
    scores = ctx.type(s)
    builder = ExprBuilder(ctx, scores, {m1: "acc"}, first_arg=3)
    expr = builder.build([ctx.graph[c] for c in chain])
    return (group.output, [m1n.inputs[0], k, m2n.inputs[1]], bool(trans), scores,
            expr.operands, expr.args, expr.lines, expr.result or "acc", False)


def _sdpa(node: Node, ctx) -> tuple:
    q, k, v = (ctx.type(i) for i in node.inputs[:3])
    if q.dtype not in BLAS_DTYPES or not (q.rank == k.rank == v.rank >= 3) or \
            q.shape[:-2] != k.shape[:-2] or q.shape[:-2] != v.shape[:-2]:
        raise Unsupported("attention with broadcast batch dims")
    scores = TensorType((*q.shape[:-1], k.shape[-2]), q.dtype)
    scale = node.attrs["scale"]
    if scale is None and is_static(q.shape[-1]):
        scale = 1.0 / q.shape[-1] ** 0.5
    sc = literal(scale, q.dtype) if scale is not None else \
        f"({literal(1, q.dtype)} / np.sqrt({np_name(q.dtype)}(d)))"
    lines, operands, args = [f"t0 = acc * {sc}"], [], []
    result = "t0"
    if len(node.inputs) == 4:
        mask = ctx.type(node.inputs[3])
        operands.append(Operand("x3", broadcast_axes(mask, scores)))
        args.append(node.inputs[3])
        lines.append("a0 = LOAD0")
        if mask.dtype is DType.bool:
            # torch adds -inf where masked: NaN at a NaN or +inf score
            lines.append(f"t1 = t0 if a0 else t0 + {literal(float('-inf'), q.dtype)}")
        else:
            lines.append("t1 = t0 + a0")
        result = "t1"
    if node.attrs["is_causal"]:
        lines.append(f"t2 = {result} if j <= i else {result} + {literal(float('-inf'), q.dtype)}")
        result = "t2"
    return (node.name, list(node.inputs[:3]), True, scores, operands, args, lines, result,
            True)


def _kernel(ctx, out_name: str, qkv: list[str], k_rows: bool, scores: TensorType, operands, args,
            chain: list[str], result: str, loads_inline: bool = False) -> KernelSpec:
    r = scores.rank
    dt = scores.dtype
    parallel = ctx.worth_parallel(scores.shape, 4 * ctx.type(qkv[0]).shape[-1])
    chain, used = chain_at_element(operands, r, chain, loads_inline)
    decode = []
    for d in sorted(used):  # b = ((b0 * n1) + b1) * n2 + b2 ...
        stride = " * ".join(f"q.shape[{e}]" for e in range(d + 1, r - 2))
        index = f"(b // ({stride}))" if stride else "b"
        decode.append(f"b{d} = {index} % q.shape[{d}]" if d > 0 else f"b0 = {index}")
    tile = ctx.add_scratch(f"{out_name}.scores", Scratch(dt, ("threads", scores.shape[-2],
                                                                  scores.shape[-1])))
    keys = ctx.add_scratch(f"{out_name}.keys", Scratch(dt, ("threads", ctx.type(qkv[0]).shape[-1],
                                                             scores.shape[-1]))) if k_rows else ""
    row = ["for j in range(sl):", "    acc = s[i, j]"] + indent(chain, 1) + [
        f"    s[i, j] = {result}", "m = vmax(s[i])",
        "if vmasked(s[i], m):", "    s[i, :] = 0", "    continue",
        f"tot = {literal(0, dt)}", "for j in range(sl):",
        f"    e = {math_call('exp', 's[i, j] - m', dt)}",
        "    s[i, j] = e", "    tot += e", f"inv = {literal(1, dt)} / tot", "for j in range(sl):",
        "    s[i, j] *= inv"]
    per_slice = _scores(k_rows) + decode + ["for i in range(ql):"] + \
        indent(row, 1) + ["gemm(s, v3[b], o3[b], 1)"]
    body = [f"nbh = q.size // (q.shape[{r - 2}] * q.shape[{r - 1}])",
            f"ql = q.shape[{r - 2}]", f"d = q.shape[{r - 1}]",
            f"sl = k.shape[{r - 2}]" if k_rows else f"sl = k.shape[{r - 1}]",
            f"dv = v.shape[{r - 1}]", "q3 = q.reshape((nbh, ql, d))",
            "k3 = k.reshape((nbh, sl, d))" if k_rows else "k3 = k.reshape((nbh, d, sl))",
            "v3 = v.reshape((nbh, sl, dv))", "o3 = out.reshape((nbh, ql, dv))",
            "parts = min(threads, nbh, tiles.shape[0])", "step = (nbh + parts - 1) // parts",
            f"for t in {'prange' if parallel else 'range'}(parts):"] + indent(
        ["s = tiles[t]", *(["kt = keys[t]"] if keys else []),
         "for b in range(t * step, min(nbh, (t + 1) * step)):"] + indent(per_slice, 1), 1)
    scratch = [tile, keys] if keys else [tile]
    params = ["q", "k", "v", *[op.arg for op in operands], "tiles", *(["keys"] if keys else []),
              "threads", "out"]
    return KernelSpec("attention", params, [*qkv, *args, *scratch, THREADS, out_name], body,
                      parallel, fastmath="rows", scratch={s: ctx.scratch[s] for s in scratch})


def _scores(k_rows: bool) -> list[str]:
    """s = q @ k^T for slice b; keys given as rows are transposed into `kt` first."""
    if not k_rows:
        return ["gemm(q3[b], k3[b], s, 1)"]
    return ["for jj in range(sl):", "    for dd in range(d):", "        kt[dd, jj] = k3[b, jj, dd]",
            "gemm(q3[b], kt, s, 1)"]


def chain_at_element(operands, r: int, chain: list[str], inline: bool):
    """(the score chain's lines with its operands loaded at score element (b.., i, j),
    the batch dims those loads index): shared with the CUDA template."""
    idx = {r - 2: "i", r - 1: "j", **{d: f"b{d}" for d in range(r - 2)}}
    loads = [load(op, idx) for op in operands]
    if inline:
        chain = [ln.replace("LOAD0", loads[0]) if loads else ln for ln in chain]
    else:
        chain = [f"a{n} = {ld}" for n, ld in enumerate(loads)] + chain
    return chain, sorted({d for d in range(r - 2) if any(f"b{d}" in ld for ld in loads)})


def load(op: Operand, idx: dict[int, str]) -> str:
    """The operand's element at score (`idx`: score dim -> index variable)."""
    parts = []
    for ax in op.axes:
        if ax.kind == BCAST:
            parts.append("0")
        elif ax.kind == FIXED:
            parts.append(ax.start)
        elif ax.kind == STRIDED:
            parts.append(f"({ax.start} + {ax.step} * {idx[ax.out]})")
        else:
            parts.append(idx[ax.out])
    return f"{op.arg}[{', '.join(parts)}]" if parts else f"{op.arg}[()]"
