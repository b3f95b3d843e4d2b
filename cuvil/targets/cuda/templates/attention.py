"""CUDA attention: `softmax(q @ k^T * scale + mask) @ v`, one thread a query row.

What the scores are is the CPU template's (`cuvil.targets.cpu.templates.attention.scores_chain`):
`scaled_dot_product_attention` (scale, mask, causal) or the same computation written out
(a matmul with k transposed, an elementwise chain, a last-dim softmax, a second matmul).
Each thread walks its row's keys once with an online softmax: the running max and sum
rescale the output row it accumulates in place, so neither the score matrix nor a row of
it is ever stored. One pass, no shared memory: a first kernel, exact for every shape.
"""

from __future__ import annotations

from cuvil.lower.physical import np_name
from cuvil.lower.spec import KernelSpec, Unsupported
from cuvil.targets.cpu.templates.attention import chain_at_element, scores_chain
from cuvil.targets.cpu.templates.elementwise import literal
from cuvil.targets.cpu.templates.loops import indent
from cuvil.targets.cuda.templates.elementwise import FLOATS, device_text


def generate(group, ctx) -> KernelSpec:
    out, qkv, k_rows, scores, operands, args, chain, result, inline = scores_chain(group, ctx)
    if scores.dtype not in FLOATS:
        raise Unsupported("CUDA attention computes floats")
    r = scores.rank
    chain, used = chain_at_element(operands, r, chain, inline)
    body = _shapes(r, k_rows) + ["t = cuda.grid(1)", "while t < nbh * ql:"] + indent(
        ["b = t // ql", "i = t % ql", *_batch_indices(used, r),
         *_online_row(chain, result, k_rows, np_name(scores.dtype), scores.dtype),
         "t += cuda.gridsize(1)"], 1)
    params = ["q", "k", "v", *[op.arg for op in operands], "out"]
    return KernelSpec("attention", params, [*qkv, *args, out], device_text(body),
                      parallel=False, fastmath="rows", note="online softmax, a thread a row")


def _shapes(r: int, k_rows: bool) -> list[str]:
    return [f"nbh = q.size // (q.shape[{r - 2}] * q.shape[{r - 1}])",
            f"ql = q.shape[{r - 2}]", f"d = q.shape[{r - 1}]",
            f"sl = k.shape[{r - 2}]" if k_rows else f"sl = k.shape[{r - 1}]",
            f"dv = v.shape[{r - 1}]", "q3 = q.reshape((nbh, ql, d))",
            "k3 = k.reshape((nbh, sl, d))" if k_rows else "k3 = k.reshape((nbh, d, sl))",
            "v3 = v.reshape((nbh, sl, dv))", "o3 = out.reshape((nbh, ql, dv))"]


def _batch_indices(used: list[int], r: int) -> list[str]:
    """The batch dims a mask reads, split off the flat slice index `b`."""
    lines = []
    for d in used:
        stride = " * ".join(f"q.shape[{e}]" for e in range(d + 1, r - 2))
        index = f"(b // ({stride}))" if stride else "b"
        lines.append(f"b{d} = {index} % q.shape[{d}]" if d > 0 else f"b0 = {index}")
    return lines


def _online_row(chain: list[str], result: str, k_rows: bool, cast: str, dtype) -> list[str]:
    """Row `i` of slice `b`: scores key by key, the output rescaled as the max grows. A
    -inf score weighs its key 0 even while the running max is -inf too (not exp(NaN)), so
    that a row of -inf scores is 0 @ v, as torch's math backend (`_safe_softmax`) has it;
    a NaN or +inf score makes the row NaN."""
    key = "k3[b, j, c]" if k_rows else "k3[b, c, j]"
    neg = literal(float("-inf"), dtype)
    return [
        f"mx = {neg}", f"tot = {cast}(0)",
        "for c in range(dv):", f"    o3[b, i, c] = {cast}(0)",
        "for j in range(sl):",
        f"    acc = {cast}(0)", "    for c in range(d):", f"        acc += q3[b, i, c] * {key}",
        *indent(chain, 1), f"    sc = {result}",
        "    if sc > mx:", "        corr = math.exp(mx - sc)", "        tot = tot * corr",
        "        for c in range(dv):", "            o3[b, i, c] *= corr", "        mx = sc",
        f"    ex = {cast}(0) if sc == {neg} else math.exp(sc - mx)", "    tot += ex",
        "    for c in range(dv):", "        o3[b, i, c] += ex * v3[b, j, c]",
        f"inv = {cast}(1) / tot if tot != 0 else {cast}(1)",
        "for c in range(dv):", "    o3[b, i, c] *= inv"]
