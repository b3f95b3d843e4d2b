"""The elementwise/broadcast template: a DAG of elementwise ops as one loop over its output.

Also lowers the ops that only move elements (`expand`, `permute`, `transpose`, `slice`,
`select`, `to_layout`): each is an identity whose input is loaded through an index map,
so a transpose followed by a `relu` is one loop. The same expression builder produces the
epilogues of the GEMM, convolution and attention templates.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field

import numpy as np

from cuvil.ir.graph import Node
from cuvil.ir.types import DType, TensorType
from cuvil.lower.dim_code import dim_code
from cuvil.lower.physical import np_name
from cuvil.lower.spec import KernelSpec, Unsupported
from cuvil.ops import element, registry
from cuvil.ops.elementwise import result_dtype
from cuvil.ops.reduce import norm_dims
from cuvil.ops.registry import CONVERT
from cuvil.targets.cpu.templates.loops import (
    FIXED,
    FULL,
    STRIDED,
    Axis,
    Operand,
    broadcast_logical,
    compose,
    emit_loops,
    identity_view,
    mapped_axes,
)


def literal(value, dtype: DType) -> str:
    """A typed constant in generated code (`np.float32(0.5)`)."""
    if dtype is DType.bool:
        return "True" if value else "False"
    if dtype.is_float:
        v = float(value)
        text = ("np.inf" if v > 0 else "-np.inf") if math.isinf(v) else (
            "np.nan" if math.isnan(v) else repr(v))
        return f"{np_name(dtype)}({text})"
    return f"{np_name(dtype)}({int(value)})"


@dataclass
class Expr:
    """Statements computing one element of a node DAG from loads of its operands."""

    operands: list[Operand] = field(default_factory=list)
    args: list[str] = field(default_factory=list)  # the value loaded through each operand
    lines: list[str] = field(default_factory=list)
    result: str = ""

    def body(self, loads: dict[str, str], target: str) -> list[str]:
        used = [f"a{i} = {loads[op.arg]}" for i, op in enumerate(self.operands)]
        return used + self.lines + [f"{target} = {self.result}"]


class ExprBuilder:
    """Builds an `Expr` for `nodes` (topological order) evaluated at each element of `out`.

    Each value is computed at a view: how its logical index follows the output's. The
    output's view is the identity; a move (`transpose`, `slice`, ...) hands its input its
    own view composed with the move's index map, so elementwise ops before a move are
    computed at the moved index and a chain of moves is one strided load. A value needed
    at two views is computed twice. The seeds (an epilogue's accumulator) exist only at
    the output's index.
    """

    def __init__(self, ctx, out: TensorType, seeds: dict[str, str] | None = None,
                 first_arg: int = 0):
        self.ctx, self.out = ctx, out
        self.expr = Expr()
        self.seeds = dict(seeds or {})
        self.vars: dict[tuple[str, tuple[Axis, ...]], str] = {}
        self.keys: dict[tuple, str] = {}
        self.first_arg = first_arg
        self.nodes: dict[str, Node] = {}

    def build(self, nodes: list[Node]) -> Expr:
        if not nodes:
            return self.expr
        self.nodes = {n.name: n for n in nodes}
        root = nodes[-1]
        view = tuple(broadcast_logical(root.type, self.out))
        self.expr.result = self._value(root.name, view)
        return self.expr

    def load(self, value: str, axes: tuple[Axis, ...]) -> str:
        key = (value, axes)
        if key not in self.keys:
            i = len(self.expr.operands)
            self.expr.operands.append(Operand(f"x{self.first_arg + i}", axes))
            self.expr.args.append(value)
            self.keys[key] = f"a{i}"
        return self.keys[key]

    def _value(self, name: str, view: tuple[Axis, ...]) -> str:
        """The variable holding `name` at `view`, computed (with what it needs) if new."""
        if (name, view) in self.vars:
            return self.vars[name, view]
        if name in self.seeds:
            if view != identity_view(len(view)):
                raise Unsupported(f"{name} is read at another index than the output's")
            return self.seeds[name]
        if name not in self.nodes:
            return self.load(name, mapped_axes(self.ctx.type(name), list(view)))
        n = self.nodes[name]
        dts = [self.ctx.type(i).dtype for i in n.inputs]
        args = [self.operand(n, k, want, view)
                for k, want in enumerate(_arg_dtypes(n, dts, self.ctx))]
        var = f"t{len(self.expr.lines)}"
        self.expr.lines.append(f"{var} = {expression(n, args, n.type.dtype, dts)}")
        self.vars[name, view] = var
        return var

    def operand(self, node: Node, k: int, want: DType, view: tuple[Axis, ...]) -> str:
        """Input `k` of `node` (computed at `view`) as an expression of dtype `want`."""
        v = node.inputs[k]
        scalar = self.ctx.scalar_value(v) if v not in self.nodes else None
        if scalar is not None:
            return literal(scalar, want)
        value = self._value(v, compose(self._input_map(node, k), view))
        return _cast(value, self.ctx.type(v).dtype, want)

    def _input_map(self, node: Node, k: int) -> list[Axis]:
        """How input `k` of `node` is indexed from `node`'s index, per logical dim."""
        t, a = self.ctx.type(node.inputs[k]), node.attrs
        if node.op == "batch_norm" and k > 0:
            return broadcast_logical(t, node.type, lead=1)
        if node.op in ("permute", "transpose"):
            order = _permutation(node, t.rank)
            return [Axis(FULL, order.index(d)) for d in range(t.rank)]
        if node.op == "slice":
            d = norm_dims(a["dim"], t.rank, "slice")[0]
            per = [Axis(FULL, i) for i in range(t.rank)]
            start = _slice_start(a["start"], t.shape[d])
            per[d] = Axis(STRIDED, d, start, a["step"])
            return per
        if node.op == "flip":  # index size - 1 - i along each flipped dim
            per = [Axis(FULL, i) for i in range(t.rank)]
            for d in norm_dims(tuple(a["dims"]), t.rank, "flip"):
                last = str(t.shape[d] - 1) if isinstance(t.shape[d], int) else \
                    f"({dim_code(t.shape[d])} - 1)"
                per[d] = Axis(STRIDED, d, last, -1)
            return per
        if node.op == "select":
            d = norm_dims(a["dim"], t.rank, "select")[0]
            index = a["index"] if a["index"] >= 0 else f"{dim_code(t.shape[d])} + {a['index']}"
            per = [Axis(FULL, i if i < d else i - 1) for i in range(t.rank)]
            per[d] = Axis(FIXED, None, str(index))
            return per
        return broadcast_logical(t, node.type)


def _arg_dtypes(n: Node, dts: list[DType], ctx) -> list[DType]:
    """The dtype each argument is computed in (torch's promotion, made explicit): truth
    values in bool, a comparison's operands in their common dtype, conversions' inputs as
    they are, everything else in the output's dtype."""
    opdef, out = registry.get(n.op), n.type.dtype
    if opdef.kind == CONVERT:
        return dts
    if not opdef.element:
        return [out] * len(dts)
    names = _names(opdef)
    truth = element.truth_values(opdef.element, names)
    common = result_dtype([ctx.type(i) for i in n.inputs]) \
        if element.is_comparison(opdef.element, names) else out
    return [DType.bool if name in truth else common for name in opdef.inputs[:len(dts)]]


def _names(opdef) -> tuple[str, ...]:
    return (*opdef.inputs, *(a.name for a in opdef.attrs))


def _permutation(node: Node, rank: int) -> list[int]:
    if node.op == "permute":
        return [d % rank for d in node.attrs["dims"]]
    d0 = norm_dims(node.attrs["dim0"], rank, "transpose")[0]
    d1 = norm_dims(node.attrs["dim1"], rank, "transpose")[0]
    order = list(range(rank))
    order[d0], order[d1] = d1, d0
    return order


def _slice_start(start: int, size) -> str:
    if start >= 0:
        return str(start)
    if isinstance(size, int):
        return str(max(size + start, 0))
    raise Unsupported("slice: negative start on a symbolic dim")


def _cast(x: str, have: DType, want: DType) -> str:
    if have == want:
        return x
    if want is DType.bool:
        return f"({x} != 0)"
    return f"{np_name(want)}({x})"


# How the element functions (`cuvil.ops.element.FUNCTIONS`) are spelled in a kernel.
_CALL = {"sqrt": "np.sqrt", "exp": "np.exp", "log": "np.log", "tanh": "np.tanh",
         "erf": "math.erf", "abs": "abs", "sin": "np.sin", "cos": "np.cos"}
# f32 kernels use the vectorizable versions in cuvil.targets.cpu.kernels.vmath (5-20x faster here)
_VMATH = {"exp": "vexp", "tanh": "vtanh", "erf": "verf", "sigmoid": "vsigmoid"}


def math_call(fn: str, arg: str, dtype: DType) -> str:
    """`fn(arg)` in `dtype`: vectorizable arithmetic for f32, the C library otherwise."""
    if dtype is DType.f32 and fn in _VMATH:
        return f"np.float32({_VMATH[fn]}({arg}))"
    if fn in ("max", "min"):
        return f"{fn}({arg})"
    if fn == "sigmoid":
        one = literal(1, dtype)
        return f"({one} / ({one} + np.exp(-{arg})))"
    return f"{_CALL[fn]}({arg})"
def expression(n: Node, a: list[str], out: DType, dts: list[DType]) -> str:
    """One element of `n` from its (already cast) argument expressions: its catalog
    element expression, or the code below for the ops whose element depends on dtypes."""
    opdef = registry.get(n.op)
    if opdef.lowering in ("move", "alias", "transfer"):
        return a[0]  # the input's index map does the moving
    if n.op == "rsqrt" and out.is_float:
        return f"vrsqrt({a[0]})"  # no reciprocal-sqrt estimate at 0, inf or subnormals
    if opdef.element:
        return _element(opdef, n, a, out, dts)
    if n.op == "cast":
        return _cast(a[0], dts[0], out)
    if n.op in _WITH_ATTRS:
        return _WITH_ATTRS[n.op](a, n.attrs, out, dts)
    if n.op == "pow":
        return _pow(a[0], a[1], n, out)
    raise Unsupported(f"no elementwise code for {n.op}")


def _element(opdef, n: Node, a: list[str], out: DType, dts: list[DType]) -> str:
    """The catalog's element expression spelled with this kernel's arguments and literals
    typed as the computation (a comparison's numbers in its operands' dtype)."""
    names = _names(opdef)
    num = out if out is not DType.bool or not a else \
        (dts[0] if element.is_comparison(opdef.element, names) else DType.bool)
    args = dict(zip(opdef.inputs, a, strict=False))

    def name(v: str) -> str:
        return args[v] if v in args else literal(n.attrs[v], num)

    return element.render(opdef.element, names, name, lambda v: literal(v, num),
                          lambda fn, xs: _call(fn, xs, num))


_LITERAL = re.compile(r"np\.\w+\((-?np\.inf|[-+0-9.e]+)\)")
# torch's maximum/minimum: NaN if either operand is NaN (Python's max keeps its first)
_NAN_MINMAX = {"max": "vmaximum", "min": "vminimum"}


def _call(fn: str, xs: list[str], dtype: DType) -> str:
    """`fn(*xs)`: a max or min of a variable and a number keeps the variable first, so that
    its NaN is kept; of two variables, float ones, it is NaN if either is."""
    if fn in _NAN_MINMAX and len(xs) == 2:
        a, b = xs
        if _LITERAL.fullmatch(a) and not _LITERAL.fullmatch(b):
            a, b = b, a
        if dtype.is_float and not _LITERAL.fullmatch(b):
            return f"{_NAN_MINMAX[fn]}({a}, {b})"
        xs = [a, b]
    return math_call(fn, ", ".join(xs), dtype)


def _clamp(a, at, out, dts) -> str:
    lo, hi = (at["min_val"], at["max_val"]) if "min_val" in at else (at["min"], at["max"])
    x = a[0] if lo is None else f"max({a[0]}, {literal(lo, out)})"
    return x if hi is None else f"min({x}, {literal(hi, out)})"


def _gelu(a, at, out, dts) -> str:
    c = lambda v: literal(v, out)  # noqa: E731
    if at["approximate"] == "tanh":
        inner = f"{c(math.sqrt(2 / math.pi))} * ({a[0]} + {c(0.044715)} * {a[0]} * {a[0]} * {a[0]})"
        return f"({c(0.5)} * {a[0]} * ({c(1)} + {math_call('tanh', inner, out)}))"
    erf = math_call("erf", f"{a[0]} * {c(math.sqrt(0.5))}", out)
    return f"({c(0.5)} * {a[0]} * ({c(1)} + {erf}))"


def _quantize(a, at, out, dts) -> str:
    lo, hi = {DType.i8: (-128, 127), DType.u8: (0, 255), DType.i32: (-2**31, 2**31 - 1)}[out]
    f = dts[0]
    q = f"np.rint({a[0]} / {literal(at['scale'], f)}) + {literal(at['zero_point'], f)}"
    return f"{np_name(out)}(min(max({q}, {literal(lo, f)}), {literal(hi, f)}))"


_WITH_ATTRS = {
    "hardtanh": _clamp, "clamp": _clamp, "gelu": _gelu, "quantize": _quantize,
    "masked_fill": lambda a, at, out, dts: f"({literal(at['value'], out)} if {a[1]} else {a[0]})",
    "batch_norm": lambda a, at, out, dts: _batch_norm(a, at, out),
    "dequantize": lambda a, at, out, dts: (f"((np.float32({a[0]}) - "
                                            f"{literal(at['zero_point'], out)}) * "
                                            f"{literal(at['scale'], out)})"),
}


def _pow(x: str, y: str, n: Node, out: DType) -> str:
    for v, text in ((2.0, f"({x} * {x})"), (3.0, f"({x} * {x} * {x})"),
                    (0.5, f"np.sqrt({x})"), (1.0, x)):
        if y in (literal(v, out), literal(int(v), out)):
            return text
    return f"({x} ** {y})"


def _batch_norm(a: list[str], at: dict, out: DType) -> str:
    if len(a) == 3:  # prepared: x, scale, shift
        return f"({a[0]} * {a[1]} + {a[2]})"
    x, w, b, mean, var = a
    return f"(({x} - {mean}) / np.sqrt({var} + {literal(at['eps'], out)}) * {w} + {b})"


def _norm_factor(which: str, eps: float, dt, *stats: np.ndarray) -> np.ndarray:
    """Batch norm's per-channel `scale` (w / sqrt(var + eps)) or `shift` (b - mean * scale)."""
    w, b, mean, var = (s.astype("float64") for s in stats)
    scale = w / (var + eps) ** 0.5
    return (scale if which == "scale" else b - mean * scale).astype(dt)


def prepare_batch_norm(node: Node, ctx) -> Node:
    """With constant statistics, batch_norm becomes `x * scale + shift` per channel."""
    if node.op != "batch_norm" or not all(ctx.is_const(i) for i in node.inputs[1:]):
        return node
    eps, dt = node.attrs["eps"], node.type.dtype.numpy
    names = [ctx.prepare_from(f"{node.name}.{k}", functools.partial(_norm_factor, k, eps, dt),
                              *node.inputs[1:]) for k in ("scale", "shift")]
    from dataclasses import replace

    return replace(node, inputs=(node.inputs[0], *names))


def generate(group, ctx) -> KernelSpec:
    """An elementwise group: one loop over its output computing the whole DAG."""
    from cuvil.targets.cpu.templates import movement
    from cuvil.targets.cpu.templates.mapped_binary import mapped_binary

    if movement.is_move(group, ctx):
        return movement.generate(group, ctx)
    if any(registry.is_reshape(n.op) for n in group.node_list(ctx)):
        raise Unsupported("views inside an elementwise loop")
    nodes = [prepare_batch_norm(n, ctx) for n in group.node_list(ctx)]
    out = nodes[-1].type
    expr = ExprBuilder(ctx, out).build(nodes)
    if not expr.result:
        raise Unsupported("empty elementwise group")
    library = mapped_binary(nodes, expr, out, group.output, ctx)
    if library is not None:
        return library
    parallel = ctx.worth_parallel(out.shape)
    body = emit_loops(out, expr.operands, expr.body, ctx.par_min, parallel)
    params = [op.arg for op in expr.operands] + ["out"]
    return KernelSpec("elementwise", params, [*expr.args, group.output], body, parallel)


__all__ = ["Expr", "ExprBuilder", "expression", "generate", "literal"]
