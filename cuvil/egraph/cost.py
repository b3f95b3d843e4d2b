"""The cost model: microseconds per e-node, from shapes, dtypes, layouts and devices.

An op's cost is its `.cvr` `cost` declaration if it has one (which may scale the default
with `roofline()`), else the default roofline
`launch_us + max(flops / (1e3 * gflops), bytes / (1e3 * gbps))` with the parameters of the
target that owns the node's device. A composite op that names its kernel family pays one
launch and the flops of its whole body, but moves only its inputs and output: that is why
fusion wins; one that names none is lowered as its parts, and costs what they do. Each part of
the body's flops counts at the rate its own op's declared cost charges against its
roofline (a convolution that runs as Winograd, 0.55): fusing an epilogue into it keeps
what the declaration says of it. Conversions pay
for the bytes they move (`to_device` over the host link), except a constant moved to a
device: the runtime uploads it once, so a call pays 1/`UPLOAD_CALLS` of it
(`upload_cost`). Leaves are free, pure views nearly so. Costs are finite and non-negative.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import sympy

from cuvil.dsl import ast
from cuvil.dsl.builtins import BUILTINS, COST, NOWHERE, Known, Site
from cuvil.errors import CuvilError
from cuvil.ir.devices import HOST, device_params, device_target
from cuvil.ir.types import SYMBOLIC_DIM_SIZE, Dim, TensorType, is_static
from cuvil.library.composite import body_calls
from cuvil.ops import registry

VIEW_COST = 0.05
FALLBACK_US = 20.0
UPLOAD_CALLS = 1000  # the calls a constant's one upload to a device is amortized over
MAX_COST = 1e15


@dataclass
class CostModel:
    defs: dict
    costs: dict = field(default_factory=dict)  # op -> ast.CostDecl
    targets: dict = field(default_factory=dict)  # name -> params (from .cvr targets)
    hints: dict[str, int] = field(default_factory=dict)  # symbol -> size assumed
    device_params: dict = field(default_factory=dict)  # target name -> registered params
    _memo: dict = field(default_factory=dict)
    _registered: tuple | None = None  # (device -> target, target -> registered params)

    def params(self, device: str) -> dict[str, float]:
        """The parameters of the target that computes `device` (its own registered ones,
        then those the pipeline passed in, then `.cvr` `target NAME(...)` overrides); a
        device no target describes costs like the host."""
        if self._registered is None:  # the registry, read once per cost model
            self._registered = (device_target(), device_params())
        owners, defaults = self._registered
        name = owners.get(device, device)
        host = owners[HOST]
        base = (self.device_params.get(name) or defaults.get(name)
                or self.device_params.get(host) or defaults[host])
        return {**base, **self.targets.get(name, {})}

    def link_gbps(self, *devices: str) -> float:
        """The host link's bandwidth of the first of `devices` with one (a device that is
        not the host's memory), else 25 GB/s."""
        for d in devices:
            link = self.params(d).get("link_gbps")
            if link is not None:
                return link
        return 25.0

    def size(self, d: Dim) -> float:
        if is_static(d):
            return float(d)
        subs = {s: self.hints.get(str(s), SYMBOLIC_DIM_SIZE) for s in d.free_symbols}
        return float(sympy.sympify(d).subs(subs))

    def numel(self, t: TensorType) -> float:
        return math.prod(self.size(d) for d in t.shape)

    def bytes(self, t: TensorType) -> float:
        return self.numel(t) * t.dtype.itemsize

    def node_cost(self, op: str, attrs: dict[str, Any], ins: list[TensorType],
                  out: TensorType) -> float:
        key = (op, _freeze(attrs), tuple(ins), out)
        if key not in self._memo:
            self._memo[key] = _clamp(self._cost(op, attrs, ins, out))
        return self._memo[key]

    def _cost(self, op, attrs, ins, out) -> float:
        opdef = registry.get(op, self.defs)
        if opdef.kind == registry.LEAF:
            return 0.0
        if opdef.lowering == "alias":
            return VIEW_COST
        p = self.params(out.device)
        if op in self.costs:
            return self.declared(self.costs[op], attrs, ins, out, p)
        if opdef.kind == registry.COMPOSITE and opdef.body is not None and not opdef.kernel:
            return sum(self.node_cost(*call) for call in body_calls(opdef, ins, attrs,
                                                                     self.defs))
        return self.roofline(op, attrs, ins, out, p, self.work(op, attrs, ins, out, p))

    def roofline(self, op, attrs, ins, out, p: dict[str, float],
                 work: float | None = None) -> float:
        """`launch_us + max(flops / (1e3 * gflops), bytes / (1e3 * gbps))`, in us; `work`
        in place of the flops if given (`work`: a composite op's body at its rates)."""
        moved = sum(self.bytes(t) for t in ins) + self.bytes(out)
        if op == "to_device":
            link = self.link_gbps(out.device, *(t.device for t in ins))
            return p["launch_us"] + self.bytes(out) / (1e3 * link)
        work = self.flops(op, attrs, ins, out) if work is None else work
        return roofline_us(p, work, moved) + (FALLBACK_US if op == "torch_op" else 0.0)

    def upload_cost(self, out: TensorType) -> float:
        """`to_device` of a constant: the runtime copies it to the device once, when the
        graph is built (`cuvil.runtime.build`), so one call pays its link time amortized
        over `UPLOAD_CALLS` calls, and no launch."""
        link = self.link_gbps(out.device)
        return _clamp(self.bytes(out) / (1e3 * link) / UPLOAD_CALLS)

    def work(self, op: str, attrs: dict, ins: list[TensorType], out: TensorType,
             p: dict[str, float]) -> float:
        """The flops a default roofline charges: a composite op's body part by part, each
        at the rate of its op's declared cost (declared / plain roofline) where one is
        declared, an undeclared composite part by its own body."""
        opdef = registry.get(op, self.defs)
        if opdef.kind != registry.COMPOSITE or opdef.body is None:
            return self.flops(op, attrs, ins, out)
        total = 0.0
        for part, a, types, result in body_calls(opdef, ins, attrs, self.defs):
            if part not in self.costs:
                total += self.work(part, a, types, result, p)
                continue
            flops, full = self.flops(part, a, types, result), \
                self.roofline(part, a, types, result, p)
            total += flops * self.node_cost(part, a, types, result) / full if full > 0 else flops
        return total

    def flops(self, op: str, attrs: dict, ins: list[TensorType], out: TensorType) -> float:
        value = registry.flops(op, ins, out, attrs, self.defs)
        return float(value) if isinstance(value, int | float) else self.size(value)

    # -- `cost OP(params) = EXPR` ---------------------------------------------------------
    def declared(self, decl, attrs, ins, out, target: dict[str, float]) -> float:
        opdef = registry.get(decl.op, self.defs)
        values: list[Any] = [*ins, *(attrs[a.name] for a in opdef.attrs)]
        env = dict(zip(decl.params, values, strict=False))
        site = Site(node={
            "roofline": lambda: self.roofline(decl.op, attrs, ins, out, target),
            "flops": lambda: self.flops(decl.op, attrs, ins, out),
            "moved": lambda: sum(self.bytes(t) for t in ins) + self.bytes(out)})
        return float(self._eval(decl.expr, env, target, decl, site))

    def _eval(self, e, env: dict, target: dict, decl, site: Site = NOWHERE) -> Any:
        match e:
            case ast.Literal(value=v):
                return v
            case ast.Var(name=name):
                return env[name]
            case ast.TargetParam(name=name):
                if name not in target:
                    raise CuvilError(f"{e.pos}: error: the target has no parameter {name!r}")
                return target[name]
            case ast.Neg(operand=x):
                return -self._eval(x, env, target, decl, site)
            case ast.Not(operand=x):
                return not self._eval(x, env, target, decl, site)
            case ast.BinOp(op=op, left=a, right=b):
                return _binop(op, self._eval(a, env, target, decl, site),
                              self._eval(b, env, target, decl, site))
            case ast.Builtin(name=name, args=args):
                vals = [self._eval(a, env, target, decl, site) for a in args]
                return self._builtin(name, vals, e, site)
        raise CuvilError(f"{decl.pos}: error: unsupported cost expression")

    def _builtin(self, name: str, vals: list, e, site: Site) -> Any:
        """The built-in table's value; a symbolic size at its assumed size (`hints`), an
        out-of-range `dim` 0."""
        spec = BUILTINS.get(name)
        if spec is None or COST not in spec.where:
            raise CuvilError(f"{e.pos}: error: '{name}' cannot be used in a cost")
        value = spec.value(site, *(Known(v) if isinstance(v, TensorType) else v for v in vals))
        if value is None:
            return 0.0
        return self.size(value) if isinstance(value, sympy.Basic) else value


def roofline_us(p: dict[str, float], flops: float, moved: float) -> float:
    """`launch_us + max(flops / (1e3 * gflops), moved / (1e3 * gbps))`: one kernel's
    microseconds on the device `p` describes (its flops and the bytes it moves)."""
    return p["launch_us"] + max(flops / (1e3 * p["gflops"]), moved / (1e3 * p["gbps"]))


def _binop(op: str, a: Any, b: Any) -> Any:
    if op in ("/", "%") and b == 0:
        return MAX_COST
    ops = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b,
           "%": lambda: a % b, "==": lambda: a == b, "!=": lambda: a != b,
           "<": lambda: a < b, "<=": lambda: a <= b, ">": lambda: a > b, ">=": lambda: a >= b,
           "and": lambda: a and b, "or": lambda: a or b}
    return ops[op]()


def _clamp(x: float) -> float:
    x = float(x)
    if math.isnan(x) or x > MAX_COST:
        return MAX_COST
    return max(0.0, x)


def _freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple((k, _freeze(x)) for k, x in v.items())
    return v
