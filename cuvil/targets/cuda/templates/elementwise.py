"""CUDA elementwise kernels: the CPU template's element expressions, one thread an element.

The expression of a group is built by the CPU's `ExprBuilder` from each op's catalog
`element` (so both targets compute the same thing); here it runs in a grid-stride loop
over the output's flat index, which is split into physical indices, each operand loaded
through its index map (full, strided, broadcast or fixed axes). Math calls are spelled for
the device (`math.exp`, the runtime's `vexp`, ...).
"""

from __future__ import annotations

from cuvil.ir.types import DType, TensorType
from cuvil.lower.group import is_move_chain
from cuvil.lower.physical import layout_perm
from cuvil.lower.spec import KernelSpec, Unsupported
from cuvil.ops import registry
from cuvil.targets.cpu.templates.elementwise import ExprBuilder
from cuvil.targets.cpu.templates.loops import BCAST, FIXED, STRIDED, Operand

FLOATS = (DType.f32, DType.f64)
# host spellings (the CPU's element code) -> device spellings
DEVICE_MATH = {"np.exp(": "math.exp(", "np.sqrt(": "math.sqrt(", "np.log(": "math.log(",
               "np.tanh(": "math.tanh(", "math.erf(": "math.erf(", "np.sin(": "math.sin(",
               "np.cos(": "math.cos("}


def generate(group, ctx) -> KernelSpec:
    """One grid-stride kernel computing the group's DAG at every element of its output."""
    nodes = group.node_list(ctx)
    if any(registry.is_reshape(n.op) for n in nodes):
        if is_move_chain(group, ctx.graph):
            from cuvil.targets.cuda.templates import copy  # it builds on this module

            return copy.generate(group, ctx)
        raise Unsupported("views inside an elementwise kernel")
    out = nodes[-1].type
    expr = ExprBuilder(ctx, out).build(nodes)
    if not expr.result:
        raise Unsupported("empty elementwise group")
    index = output_indices(out)
    loads = {op.arg: load(op, index) for op in expr.operands}
    body = grid_loop(out.rank, [*expr.body(loads, "value"), f"{element('out', index[0])} = value"])
    params = [op.arg for op in expr.operands] + ["out"]
    return KernelSpec("elementwise", params, [*expr.args, group.output], device_text(body),
                      parallel=False)


def epilogue(ctx, head: str, rest, out: TensorType, index: tuple[list[str], dict[int, str]],
             first_arg: int) -> tuple[list[str], list[str], list[str]]:
    """(params, args, store lines): `out` at `index` (`output_indices`) from `acc`, the
    value of node `head`, through the elementwise nodes `rest` after it (an epilogue)."""
    params, args, lines = epilogue_value(ctx, head, rest, out, index, first_arg)
    return params, args, [*lines, f"{element('out', index[0])} = value"]


def epilogue_value(ctx, head: str, rest, out: TensorType,
                   index: tuple[list[str], dict[int, str]], first_arg: int
                   ) -> tuple[list[str], list[str], list[str]]:
    """(params, args, lines leaving in `value`) the epilogue `rest` of `acc` (the value of
    node `head`) at `index` of a value typed `out`."""
    if not rest:
        return [], [], ["value = acc"]
    expr = ExprBuilder(ctx, out, {head: "acc"}, first_arg=first_arg).build(rest)
    loads = {op.arg: load(op, index) for op in expr.operands}
    return [op.arg for op in expr.operands], list(expr.args), expr.body(loads, "value")


def output_indices(out: TensorType) -> tuple[list[str], dict[int, str]]:
    """(the output's physical index variables, logical dim -> its index variable)."""
    perm = layout_perm(out)
    phys = [f"p{k}" for k in range(out.rank)]
    return phys, {q: phys[p] for p, q in enumerate(perm)}


def load(op: Operand, index: tuple[list[str], dict[int, str]]) -> str:
    """The operand's element at the output's current index."""
    if not op.axes:
        return f"{op.arg}[()]"
    logical = index[1]
    parts = []
    for ax in op.axes:
        if ax.kind == BCAST:
            parts.append("0")
        elif ax.kind == FIXED:
            parts.append(_index_code(ax.start))
        elif ax.kind == STRIDED:
            step = "" if ax.step == 1 else f"{ax.step} * "
            parts.append(f"{_index_code(ax.start)} + {step}{logical[ax.out]}")
        else:
            parts.append(logical[ax.out])
    return f"{op.arg}[{', '.join(parts)}]"


def element(array: str, index: list[str]) -> str:
    """`array` at `index` (a 0-d array at `()`)."""
    return f"{array}[{', '.join(index) or '()'}]"


def _index_code(text: str) -> str:
    if "n_" in text:
        raise Unsupported("an index over a symbolic dim")
    return text


def grid_loop(rank: int, inner: list[str]) -> list[str]:
    """`inner` for every flat index of `out`, its physical indices `p0..` split off."""
    lines = ["i = cuda.grid(1)", "step = cuda.gridsize(1)", "while i < out.size:", "    r = i"]
    for k in range(rank - 1, 0, -1):
        lines += [f"    p{k} = r % out.shape[{k}]", f"    r = r // out.shape[{k}]"]
    lines.append("    p0 = r")
    lines += ["    " + ln for ln in inner]
    lines.append("    i += step")
    return lines


def device_text(lines: list[str]) -> list[str]:
    """Host math spelled for the device; the ops it has no spelling for are refused."""
    out = []
    for line in lines:
        if "np.rint(" in line or "np.log1p(" in line:
            raise Unsupported("no device spelling for rounding")
        for host, dev in DEVICE_MATH.items():
            line = line.replace(host, dev)
        out.append(line)
    return out
