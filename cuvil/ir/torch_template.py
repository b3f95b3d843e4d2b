"""The call a `torch_op` node stands for, as plain data, and making it; without sympy.

A `torch_op` node's attributes name an aten op (`target`) and hold its arguments as a
template: `"$i"` stands for tensor input i, a tagged string for a torch object
(`%torch.float32`, `%device:cpu`; a string that could be read as either is escaped as
`%str:...`), tuples for sequences, and plain numbers. A symbolic size is a dim in the IR
(sympy); in a `TorchCall`, the plain form the runtime and the program cache hold, it is
`%dim:<text>` (`ir/dim_text.py` evaluates it), so the call needs no IR.

    call = TorchCall.of(attrs, dim_text)      # at lowering; None if it has no plain form
    run = call.bound(env)                     # sizes for this call's symbolic dims
    result = run(tensors)
    known_pure(call.target)                   # writes none of its arguments, for sure
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from cuvil.errors import CuvilError
from cuvil.ir.dim_text import size

_TORCH_OBJECTS = (torch.dtype, torch.layout, torch.memory_format)
_DIM = "%dim:"


def resolve_target(target: str):
    """`aten.cumsum.default` -> the torch op overload; a clear error if it does not exist."""
    obj: Any = torch.ops
    for part in target.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise CuvilError(f"torch_op: no torch op {target!r}")
    return obj


def known_pure(target: str) -> bool:
    """Whether the op `target` names is known to write none of its arguments: torch's own
    (`aten`) ops whose schema marks no argument as written. A custom op's schema says what
    its author declared, not what its code does, so it is not."""
    try:
        op = resolve_target(target)
    except CuvilError:
        return False
    schema = getattr(op, "_schema", None)
    return getattr(op, "namespace", None) == "aten" and schema is not None \
        and not schema.is_mutable


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
    """The arguments `template` stands for, with `tensors` as its inputs."""
    if isinstance(template, str) and template.startswith("$") and template[1:].isdigit():
        return tensors[int(template[1:])]
    if isinstance(template, str) and template.startswith("%"):
        return decode_arg(template)
    if isinstance(template, tuple):
        return tuple(fill_template(t, tensors) for t in template)
    return template


def filler(template: Any) -> Callable[[list[torch.Tensor]], Any]:
    """`fill_template` of `template` as a function of the tensors, the template read once:
    each part that names no input is decoded once, here."""
    if not _names_input(template):
        value = fill_template(template, [])
        return lambda tensors: value
    if isinstance(template, tuple):
        parts = [filler(t) for t in template]
        return lambda tensors: tuple([part(tensors) for part in parts])
    index = int(template[1:])
    return lambda tensors: tensors[index]


def _names_input(template: Any) -> bool:
    if isinstance(template, tuple):
        return any(_names_input(t) for t in template)
    return isinstance(template, str) and template.startswith("$") and template[1:].isdigit()


@dataclass(frozen=True)
class TorchCall:
    """A `torch_op` node's call as plain data: its templates hold sizes as `%dim:` text."""

    target: str
    args: tuple
    kwargs: tuple  # (name, template) pairs
    index: int | None  # which result of an op that returns several

    @staticmethod
    def of(attrs: dict[str, Any], dim_text: Callable[[Any], str | None]) -> TorchCall | None:
        """The call of a node with `attrs`; `dim_text(x)` is a size's text, or None if `x`
        is not a size. None if a template holds something with no plain form."""
        def plain(t: Any) -> Any:
            if isinstance(t, tuple):
                return tuple(plain(v) for v in t)
            if t is None or isinstance(t, bool | int | float | str):
                return t
            text = dim_text(t)
            if text is None:
                raise ValueError(t)
            return _DIM + text
        try:
            return TorchCall(attrs["target"], plain(attrs["args"]), plain(attrs["kwargs"]),
                             attrs["index"])
        except ValueError:
            return None

    @staticmethod
    def from_json(data: dict[str, Any]) -> TorchCall:
        return TorchCall(data["target"], _tuples(data["args"]), _tuples(data["kwargs"]),
                         data["index"])

    def bound(self, env: dict[str, int]) -> Callable[[list[torch.Tensor]], torch.Tensor]:
        """The call with this call's sizes of the symbolic dims: tensors in, result out."""
        op, index = resolve_target(self.target), self.index
        args, kwargs = filler(_sized(self.args, env)), filler(_sized(self.kwargs, env))

        def run(tensors: list[torch.Tensor]) -> torch.Tensor:
            result = op(*args(tensors), **dict(kwargs(tensors)))
            return result if index is None else result[index]

        return run


def _sized(template: Any, env: dict[str, int]) -> Any:
    if isinstance(template, tuple):
        return tuple(_sized(t, env) for t in template)
    if isinstance(template, str) and template.startswith(_DIM):
        return size(template.removeprefix(_DIM), env)
    return template


def _tuples(data: Any) -> Any:
    """JSON's lists back to the template's tuples."""
    return tuple(_tuples(d) for d in data) if isinstance(data, list) else data
