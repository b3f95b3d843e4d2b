"""Leaves (graph inputs, constants, scalars) and `torch_op`, the opaque escape hatch.

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
from cuvil.ops.registry import LEAF, OPAQUE, AttrSpec, OpDef, register


def _leaf(name: str, attrs: tuple[AttrSpec, ...], doc: str, constant: bool) -> None:
    def infer(ts, a):
        raise CuvilError(f"{name} nodes carry their own type")

    def ref(xs, a):
        raise CuvilError(f"{name} nodes are evaluated by the executor")

    register(OpDef(name, (), attrs, infer, ref, LEAF, doc=doc, foldable=constant))


_leaf("input", (), "a graph input", constant=False)
_leaf("const", (AttrSpec("ref", "str"),), "a constant tensor, held by reference", constant=True)
register(OpDef("scalar", (), (AttrSpec("value", "number"), AttrSpec("dtype", "dtype", "f32")),
               lambda ts, a: TensorType((), DType(a["dtype"])),
               lambda xs, a: torch.tensor(a["value"], dtype=DType(a["dtype"]).torch), LEAF,
               doc="a 0-d constant"))


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
