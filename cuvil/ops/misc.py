"""Leaves (graph inputs, constants, scalars) and `torch_op`, the opaque escape hatch.

A `torch_op` node runs an aten op the catalog lacks through torch. Rules cannot see into it;
its output type is recorded at import (`out`), its call as `target` plus an argument
template in which `"$i"` stands for tensor input i. Arguments that are torch objects
(dtypes, layouts, memory formats, devices) travel as tagged strings (`encode_arg`), so the
template has a text form and pickles; symbolic sizes are dims, resolved per call.
"""

from __future__ import annotations

from typing import Any

import torch

from cuvil.errors import CuvilError
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


def resolve_target(target: str):
    """`aten.cumsum.default` -> the torch op overload; a clear error if it does not exist."""
    obj: Any = torch.ops
    for part in target.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise CuvilError(f"torch_op: no torch op {target!r}")
    return obj


_TORCH_OBJECTS = (torch.dtype, torch.layout, torch.memory_format)


def encode_arg(value: Any) -> Any:
    """A torch object argument as a tagged string: `%torch.float32`, `%device:cpu`; a string
    that could be read as a tag or a tensor input is escaped (`%str:...`). Else None."""
    if isinstance(value, _TORCH_OBJECTS):
        return "%" + str(value)
    if isinstance(value, torch.device):
        return f"%device:{value}"
    if isinstance(value, str) and value[:1] in ("$", "%"):
        return f"%str:{value}"
    return None


def decode_arg(text: str) -> Any:
    """The argument a tagged string stands for (see `encode_arg`)."""
    kind, _, rest = text[1:].partition(":")
    if kind == "device":
        return torch.device(rest)
    if kind == "str":
        return rest
    obj = getattr(torch, text[1:].removeprefix("torch."), None)
    if not isinstance(obj, _TORCH_OBJECTS):
        raise CuvilError(f"torch_op: unknown argument {text!r}")
    return obj


def fill_template(template: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(template, str) and template.startswith("$") and template[1:].isdigit():
        return tensors[int(template[1:])]
    if isinstance(template, str) and template.startswith("%"):
        return decode_arg(template)
    if isinstance(template, tuple):
        return tuple(fill_template(t, tensors) for t in template)
    return template


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
