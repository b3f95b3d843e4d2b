"""CUDA MLP: two or three products in a row, each with its elementwise epilogue (the ops of
`rules/fusion/mlp.cvr`, the layers found as the CPU template finds them,
`cuvil.targets.cpu.templates.mlp.layers`), as one kernel.

A block computes one row of the input at a time (grid-stride over the rows): its threads
share the hidden units of each layer, which stay in shared memory (`cuda.shared.array`,
the layer's static width), and wait for each other (`cuda.syncthreads`) before the next
layer reads them. No hidden layer is stored in device memory; the last layer's epilogue
(bias, residual, activation) is applied before the store.
"""

from __future__ import annotations

from cuvil.ir.types import is_static
from cuvil.lower.physical import layout_perm, np_name
from cuvil.lower.spec import KernelSpec, Unsupported
from cuvil.targets.cpu.templates.elementwise import ExprBuilder
from cuvil.targets.cpu.templates.loops import indent
from cuvil.targets.cpu.templates.mlp import layers
from cuvil.targets.cuda.templates.elementwise import FLOATS, device_text, load

MAX_HIDDEN = 4096  # units of a hidden layer in shared memory (16 KiB of f32)


def generate(group, ctx) -> KernelSpec:
    found = layers(group, ctx)
    _check(found, ctx)
    out = ctx.type(group.output)
    lead = [f"q{k}" for k in range(out.rank - 1)]
    params, args = ["x0"], [found[0][0].inputs[0]]
    shared, rows = [], []
    for i, layer in enumerate(found):
        last = i == len(found) - 1
        src = "xr[t, k]" if i == 0 else f"h{i - 1}[k]"
        dest = f"out[{', '.join([*lead, 'j'])}]" if last else f"h{i}[j]"
        lines = _layer(ctx, layer, lead, src, dest, params, args)
        rows += lines + ["cuda.syncthreads()"]
        if not last:
            t = ctx.type(layer[-1].name)
            shared.append(f"h{i} = cuda.shared.array({t.shape[-1]}, {np_name(t.dtype)})")
    body = [*shared, f"kin = x0.shape[{out.rank - 1}]", "nr = x0.size // kin",
            "xr = x0.reshape((nr, kin))", "t = cuda.blockIdx.x", "while t < nr:",
            *indent([*_split_row(out.rank), *rows, "t += cuda.gridDim.x"], 1)]
    note = " -> ".join(f"{n[0].op}" + (f" + {', '.join(m.op for m in n[1:])}" if n[1:] else "")
                       for n in found)
    return KernelSpec("mlp", [*params, "out"], [*args, group.output], device_text(body),
                      parallel=False, fastmath="fast", note=f"a block a row: {note}")


def _check(found, ctx) -> None:
    for layer in found:
        mm = layer[0]
        types = [ctx.type(mm.inputs[0]), ctx.type(mm.inputs[1]), ctx.type(layer[-1].name)]
        if any(t.dtype not in FLOATS or t.dtype != types[0].dtype for t in types):
            raise Unsupported("the CUDA MLP computes floats of one dtype")
        if types[1].rank != 2 or any(layout_perm(t) != tuple(range(t.rank)) for t in types):
            raise Unsupported("the CUDA MLP reads matrices in default layouts")
        if types[2].shape != mm.type.shape:
            raise Unsupported("an MLP epilogue that changes the product's shape")
        width = types[2].shape[-1]
        if not is_static(width) or width > MAX_HIDDEN:
            raise Unsupported(f"an MLP layer of {width} units (static, at most {MAX_HIDDEN})")


def _split_row(rank: int) -> list[str]:
    """The output's leading indices `q0..q{rank-2}` of row `t`."""
    lines = []
    for k in range(rank - 1):
        stride = " * ".join(f"out.shape[{e}]" for e in range(k + 1, rank - 1))
        index = f"(t // ({stride}))" if stride else "t"
        lines.append(f"q{k} = {index} % out.shape[{k}]" if k else f"q0 = {index}")
    return lines


def _layer(ctx, layer, lead: list[str], src: str, dest: str, params: list[str],
           args: list[str]) -> list[str]:
    """One layer's units, the block's threads striding over them: the product with the
    layer's input row (`src` at `k`), the epilogue, the store to `dest` at unit `j`."""
    mm, t = layer[0], ctx.type(layer[-1].name)
    w = f"x{len(params)}"
    params.append(w)
    args.append(mm.inputs[1])
    expr = ExprBuilder(ctx, t, {mm.name: "acc"}, first_arg=len(params)).build(layer[1:])
    index = [*lead, "j"]
    loads = {op.arg: load(op, (index, dict(enumerate(index)))) for op in expr.operands}
    params += [op.arg for op in expr.operands]
    args += expr.args
    store = expr.body(loads, "value") + [f"{dest} = value"] if expr.result else \
        [f"{dest} = acc"]
    return ["j = cuda.threadIdx.x", f"while j < {w}.shape[1]:",
            *indent([f"acc = {np_name(t.dtype)}(0)", f"for k in range({w}.shape[0]):",
                     f"    acc += {src} * {w}[k, j]", *store, "j += cuda.blockDim.x"], 1)]
