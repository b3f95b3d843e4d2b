"""The op catalog's registry: one `OpDef` per op, the semantic ground truth of Cuvil.

An `OpDef` gives an op's signature (tensor inputs, then attributes with defaults), its type
inference (shape with symbolic dims, dtype, layout, device), its reference implementation in
torch, and its work estimate for the cost model. It also says, once, what every later stage
asks about the op: its kind, the kernel family that lowers it, its element expression (for
elementwise ops), whether it folds at compile time, whether it takes floats only, and how
`rules verify` draws inputs for it. Composite ops defined in `.cvr` files are `OpDef`s too;
they live in a table passed as `defs`, not in the global catalog.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from cuvil.errors import CuvilError, ShapeError
from cuvil.ir.graph import use_catalog
from cuvil.ir.types import DType, TensorType, numel


class _Required:
    """The default of an attribute that must be given; pickles as this same object."""

    def __repr__(self) -> str:
        return "REQUIRED"

    def __reduce__(self) -> str:
        return "REQUIRED"


REQUIRED = _Required()

# Attribute kinds (`AttrSpec.kind`): int, float, optfloat (a float or None), number, str,
# bool, ints and shape (tuples; a shape may hold symbolic dims), dtype, layout, device, any.

# Op kinds: what an op computes, for costing and for `rules verify`.
ELEMENTWISE, REDUCTION, GEMM, CONV, POOL, NORM, SHAPE, CONVERT, LEAF, OPAQUE, COMPOSITE, MISC = (
    "elementwise", "reduction", "gemm", "conv", "pool", "norm", "shape", "convert", "leaf",
    "opaque", "composite", "misc")

# Kernel families (`OpDef.lowering`): which kernel template computes an op. `alias`: a free
# view of its input; `move`: an elementwise copy that only moves elements; `transfer`: a
# device move (an alias within one device); `source`: made from attributes alone (`arange`);
# `recurrent`: an RNN layer's loop over time; `scan`: `cumsum`, `diff`; `index`: advanced
# indexing; `fallback`: no kernel, the op runs in torch.
FAMILIES = ("elementwise", "move", "alias", "transfer", "gemm", "conv", "rows", "pool",
            "attention", "concat", "gather", "source", "recurrent", "scan", "index", "qgemm",
            "qconv", "leaf", "composite", "fallback")
_FAMILY_OF_KIND = {ELEMENTWISE: "elementwise", REDUCTION: "rows", GEMM: "gemm", CONV: "conv",
                   POOL: "pool", NORM: "rows", LEAF: "leaf", COMPOSITE: "composite"}


@dataclass(frozen=True)
class AttrSpec:
    name: str
    kind: str
    default: Any = REQUIRED
    samples: tuple = ()  # values `rules verify` draws for it (else its default or a random one)

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def pair(v) -> tuple:
    """An `ints` attribute of a 2-d op as (h, w): `2`, `(2,)` and `(2, 2)` all mean (2, 2),
    as in torch. The one definition: the frontend, lowering and verification use it too."""
    v = tuple(v) if isinstance(v, tuple | list) else (v,)
    return v * 2 if len(v) == 1 else v


Infer = Callable[[list[TensorType], dict[str, Any]], TensorType]
Ref = Callable[[list[torch.Tensor], dict[str, Any]], torch.Tensor]
Flops = Callable[[list[TensorType], TensorType, dict[str, Any]], Any]


@dataclass(frozen=True)
class OpDef:
    """One op: `name(inputs..., attrs...)`. An input name ending in `?` is optional."""

    name: str
    inputs: tuple[str, ...]
    attrs: tuple[AttrSpec, ...]
    infer: Infer
    ref: Ref
    kind: str = MISC
    variadic: bool = False
    flops: Flops | None = None
    doc: str = ""
    body: Any = field(default=None, compare=False)  # composite ops: the `.cvr` definition
    lowering: str = ""  # kernel family (`FAMILIES`); "" = the kind's
    kernel: str = ""  # composite ops: the family computing the body at once (dsl/kernels.py)
    element: str = ""  # elementwise: one output element (`cuvil.ops.element`)
    work: float = 1  # arithmetic per output element in the default flops
    float_only: bool = False  # floating-point inputs only (torch has no integer kernel)
    foldable: bool = True  # computed at compile time when its inputs are constants
    out_dtype: str | None = None  # the dtype it returns whatever its inputs' dtypes
    shapes: Callable | None = None  # how `rules verify` draws its inputs (`cuvil.ops.draw`)
    domain: str = ""  # "positive": `rules verify` draws mostly positive inputs
    reshapes: bool = False  # a view that keeps the element order: only the sizes change

    def __post_init__(self) -> None:
        if not self.lowering:
            object.__setattr__(self, "lowering", _FAMILY_OF_KIND.get(self.kind, "fallback"))
        if self.lowering not in FAMILIES:
            raise ValueError(f"op {self.name}: unknown kernel family {self.lowering!r}")

    @property
    def min_inputs(self) -> int:
        return sum(1 for i in self.inputs if not i.endswith("?"))

    def attr_spec(self, name: str) -> AttrSpec | None:
        return next((a for a in self.attrs if a.name == name), None)

    def complete_attrs(self, attrs: Mapping[str, Any], where: str = "") -> dict[str, Any]:
        """Attrs in signature order with defaults filled in; unknown or missing ones fail."""
        where = where or self.name
        unknown = set(attrs) - {a.name for a in self.attrs}
        if unknown:
            raise CuvilError(f"{where}: unknown attribute(s) {', '.join(sorted(unknown))}")
        result = {}
        for spec in self.attrs:
            if spec.name in attrs:
                result[spec.name] = _normalise(attrs[spec.name])
            elif spec.required:
                raise CuvilError(f"{where}: missing attribute {spec.name!r}")
            else:
                result[spec.name] = spec.default
        return result

    def check_arity(self, n: int, where: str = "") -> None:
        lo, hi = self.min_inputs, len(self.inputs)
        if n < lo or (n > hi and not self.variadic):
            want = f"at least {lo}" if self.variadic else (
                str(lo) if lo == hi else f"{lo} to {hi}")
            raise CuvilError(f"{where or self.name}: takes {want} input(s), got {n}")


def _normalise(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_normalise(v) for v in value)
    if isinstance(value, sympy.Basic):
        value = sympy.sympify(value)
        return int(value) if value.is_Integer else value
    return value


CATALOG: dict[str, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    if opdef.name in CATALOG:
        raise ValueError(f"op {opdef.name} registered twice")
    CATALOG[opdef.name] = opdef
    return opdef


def exists(name: str, defs: Mapping[str, OpDef] | None = None) -> bool:
    _load()
    return name in CATALOG or (defs is not None and name in defs)


def is_reshape(op: str) -> bool:
    """Whether catalog op `op` only changes sizes, keeping the element order (`reshapes`)."""
    _load()
    return op in CATALOG and CATALOG[op].reshapes


def get(name: str, defs: Mapping[str, OpDef] | None = None) -> OpDef:
    _load()
    if defs and name in defs:
        return defs[name]
    if name not in CATALOG:
        raise CuvilError(f"unknown op {name!r}")
    return CATALOG[name]


def all_ops() -> dict[str, OpDef]:
    _load()
    return dict(CATALOG)


def infer(op: str, types: list[TensorType], attrs: dict[str, Any], source: str = "",
          defs: Mapping[str, OpDef] | None = None) -> TensorType:
    """The type of `op(inputs, **attrs)`; errors name the op and its source line."""
    opdef = get(op, defs)
    where = op + (f" (from {source})" if source else "")
    opdef.check_arity(len(types), where)
    try:
        if opdef.float_only:
            check(all(t.dtype.is_float for t in types), "input must be float")
        return opdef.infer(types, attrs)
    except ShapeError as e:
        raise ShapeError(f"{where}: {e}") from None


def flops(op: str, types: list[TensorType], out: TensorType, attrs: dict[str, Any],
          defs: Mapping[str, OpDef] | None = None) -> Any:
    """Arithmetic work of one application (may be symbolic); default: one per output."""
    opdef = get(op, defs)
    if opdef.flops is not None:
        return opdef.flops(types, out, attrs)
    return 0 if opdef.kind in (SHAPE, LEAF) else opdef.work * numel(out.shape)


def weak_result(value: Any, t: TensorType) -> Any:
    """A reference's result over a weak operand in its inferred dtype: torch, given the
    number as a 0-d tensor, promotes to the number's dtype where a Python number would
    not (the value is the same: torch computes both in the wider type)."""
    if isinstance(value, torch.Tensor) and value.dtype != t.dtype.torch:
        return value.to(t.dtype.torch)
    return value


def weak_operand(value: Any, number: Any, out: TensorType) -> Any:
    """A weak operand's tensor as its consumer's reference takes it: a float number meets
    an f64 result at full precision (torch computes in double with the Python number),
    other results in the number's own dtype."""
    if out.dtype is DType.f64 and isinstance(number, float):
        return torch.tensor(number, dtype=torch.float64)
    return value


def check(cond: bool, message: str) -> None:
    if not cond:
        raise ShapeError(message)


def promote(*dtypes: DType) -> DType:
    result = dtypes[0].torch
    for d in dtypes[1:]:
        result = torch.promote_types(result, d.torch)
    return DType.from_torch(result)


_loaded = False


def _load() -> None:
    """Import the catalog modules (they register their ops) on first use."""
    global _loaded
    if not _loaded:
        _loaded = True
        from cuvil.ops import (  # noqa: F401
            convert,
            elementwise,
            indexing,
            linalg,
            misc,
            nn,
            quantized,
            recurrent,
            reduce,
            shape,
        )


use_catalog(sys.modules[__name__])  # Graph.add and the verifier type nodes with this catalog
