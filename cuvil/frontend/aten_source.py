"""aten ops that make tensors from sizes and numbers (masks, positions): `ones`, `zeros`,
`full`, `empty` and their `new_*`/`*_like` forms, `scalar_tensor`, `fill`, `arange`. A static
shape folds to a constant at import; a symbolic one is a scalar expanded to it, or an
`arange` node."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from cuvil.frontend.converter import Args, Value, need
from cuvil.ir.devices import HOST  # the IR's host device is torch's CPU

if TYPE_CHECKING:
    from cuvil.frontend.importer import Importer


def need_host(device: Any, what: str) -> None:
    """Only tensors on the host are Cuvil's; another device stays in torch (`Fallback`)."""
    need(device is None or torch.device(device).type == HOST, what)


def filled(value: float | None = None) -> Callable:
    """ones/zeros/full/empty and their `new_*`/`*_like` forms: a constant when the shape is
    static, else a scalar expanded to the symbolic shape; `empty` is zeros."""

    def convert(ix: Importer, a: Args) -> Value:
        fill = a.get("fill_value", 0) if value is None else value
        need(not isinstance(fill, Value), "a tensor fill value")
        need(a.get("layout") in (None, torch.strided), "layout change")
        need_host(a.get("device"), "device placement")
        from cuvil.ir.types import DType

        dtype, shape = ix.node.meta["val"].dtype, ix.out_shape()
        fill = float(fill) if dtype.is_floating_point else (
            bool(fill) if dtype == torch.bool else int(fill))
        if all(isinstance(d, int) for d in shape):  # static: a constant (masks fold)
            return ix.folded(torch.full(shape, fill, dtype=dtype), f"folded.{ix.node.name}")
        scalar = Value(ix.graph.scalar(fill, dtype=DType.from_torch(dtype)))
        return ix.add("expand", [scalar], {"shape": shape})

    return convert


def arange(ix: Importer, a: Args) -> Value:
    """A static arange is a constant; one of a symbolic size is an `arange` node (its start
    and step numbers)."""
    need(a.get("layout") in (None, torch.strided), "layout change")
    need_host(a.get("device"), "device placement")
    fake, shape = ix.node.meta["val"], ix.out_shape()
    start, step = a.get("start", 0), a.get("step", 1)
    need(all(isinstance(v, int | float) for v in (start, step)), "a symbolic start or step")
    if all(isinstance(d, int) for d in shape):
        return ix.fold(ix.node)
    from cuvil.ir.types import DType

    return ix.add("arange", [], {"shape": shape, "start": start, "step": step,
                                 "dtype": DType.from_torch(fake.dtype).value})



SOURCE_OPS: dict[str, Callable[[Importer, Args], Any]] = {
    "ones": filled(1), "zeros": filled(0), "full": filled(), "empty": filled(0),
    "new_ones": filled(1), "new_zeros": filled(0), "new_full": filled(), "new_empty": filled(0),
    "ones_like": filled(1), "zeros_like": filled(0), "full_like": filled(),
    "empty_like": filled(0), "scalar_tensor": lambda ix, a: filled(a["s"])(ix, a),
    "fill": lambda ix, a: filled(a["value"])(ix, a), "arange": arange,
}
