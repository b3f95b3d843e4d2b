"""Leaves (graph inputs, constants, scalars), `arange` (a tensor made from its size alone)
and `torch_op`, the opaque escape hatch.

A `torch_op` node runs an aten op the catalog lacks through torch. Rules cannot see into it;
its output type is recorded at import (`out`), its call as `target` plus an argument
template (`ir/torch_template.py`) in which `"$i"` stands for tensor input i. Arguments that
are torch objects (dtypes, layouts, memory formats, devices) travel as tagged strings, so
the template has a text form and pickles; symbolic sizes are dims, resolved per call.
"""

from __future__ import annotations

import torch

from cuvil.errors import CuvilError
from cuvil.ir.torch_template import fill_template, resolve_target
from cuvil.ir.types import DType, TensorType
from cuvil.ops.draw import arith, movement
from cuvil.ops.registry import LEAF, MISC, OPAQUE, AttrSpec, OpDef, register


def _leaf(name: str, attrs: tuple[AttrSpec, ...], doc: str, constant: bool) -> None:
    def infer(ts, a):
        raise CuvilError(f"{name} nodes carry their own type")

    def ref(xs, a):
        raise CuvilError(f"{name} nodes are evaluated by the executor")

    register(OpDef(name, (), attrs, infer, ref, LEAF, doc=doc, foldable=constant))


_leaf("input", (), "a graph input", constant=False)
_leaf("const", (AttrSpec("ref", "str"),), "a constant tensor, held by reference", constant=True)
register(OpDef("scalar", (), (AttrSpec("value", "number"), AttrSpec("dtype", "dtype", "f32")),
               lambda ts, a: TensorType((), DType(a["dtype"]), weak=True),
               lambda xs, a: torch.tensor(a["value"], dtype=DType(a["dtype"]).torch), LEAF,
               doc="a number standing for a tensor: 0-d and weak (its dtype follows the "
                   "tensors it meets, as a Python number's does in torch)", shapes=arith.scalar))


def _arange(a) -> torch.Tensor:
    """start + step * i for i < size, computed in f64 (in i64 for an integer dtype) as
    torch's CPU kernel accumulates, then stored in `dtype`."""
    dtype = DType(a["dtype"])
    wide = torch.float64 if dtype.is_float else torch.int64
    return (torch.arange(a["shape"][0], dtype=wide) * a["step"] + a["start"]).to(dtype.torch)


def _arange_type(ts, a) -> TensorType:
    dtype = DType(a["dtype"])
    if dtype is DType.bool or len(a["shape"]) != 1:
        raise CuvilError(f"arange: a 1-d numeric tensor, not {dtype}{list(a['shape'])}")
    return TensorType(tuple(a["shape"]), dtype)


register(OpDef("arange", (), (AttrSpec("shape", "shape"), AttrSpec("start", "number", 0),
                              AttrSpec("step", "number", 1), AttrSpec("dtype", "dtype", "i64")),
               _arange_type, lambda xs, a: _arange(a), MISC, lowering="source",
               doc="[start, start + step, ...] of length shape[0] (a symbolic size: the "
                   "importer folds a static one)", shapes=movement.arange))


def _torch_op(xs: list[torch.Tensor], a) -> torch.Tensor:
    args = fill_template(a["args"], xs)
    kwargs = dict(fill_template(a["kwargs"], xs))
    result = resolve_target(a["target"])(*args, **kwargs)
    return result[a["index"]] if a["index"] is not None else result


register(OpDef("torch_op", ("x?",),
               (AttrSpec("target", "str"), AttrSpec("args", "any", ()),
                AttrSpec("kwargs", "any", ()), AttrSpec("index", "any", None),
                AttrSpec("out", "str")),
               lambda ts, a: TensorType.parse(a["out"]), _torch_op, OPAQUE, variadic=True,
               foldable=False,
               doc="an aten op run through torch; opaque to rules"))
