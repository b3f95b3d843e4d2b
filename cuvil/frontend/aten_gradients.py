"""The aten -> Cuvil mapping of `select_backward`, the gradient of `select`: the gradient
at one index of a dim, zeros at every other, as a `cat` along that dim.

The importer records which gradient each such value holds at which index
(`Importer.scatters`), so that the sum of two of them at different indices is one `cat`
of both: the gradients of q, k and v taken from one projection (`unbind`), summed into
its gradient, are one `cat` of the three, with no zeros and no add.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cuvil.frontend.converter import Args, Value, need
from cuvil.ir.types import DType

if TYPE_CHECKING:
    from cuvil.frontend.importer import Importer


def select_backward(ix: Importer, a: Args) -> Value:
    sizes = tuple(a["input_sizes"])
    need(all(isinstance(s, int) for s in sizes) and isinstance(a["index"], int),
         "select_backward of symbolic sizes")
    grad = ix.tensor(a["grad_output"])
    need(ix.type(grad).dtype == DType.f32, "select_backward of a dtype other than f32")
    dim = a["dim"] % len(sizes)
    return scattered(ix, sizes, dim, {a["index"] % sizes[dim]: grad})


def scattered(ix: Importer, sizes: tuple, dim: int, parts: dict[int, Value]) -> Value:
    """The tensor of shape `sizes` that holds `parts[i]` at index i of `dim`, zeros at
    each other index."""
    pieces, missing = [], 0
    for i in range(sizes[dim] + 1):
        if (i in parts or i == sizes[dim]) and missing:
            shape = sizes[:dim] + (missing,) + sizes[dim + 1:]
            pieces.append(ix.filled(0.0, shape))
            missing = 0
        if i in parts:
            pieces.append(ix.add("unsqueeze", [parts[i]], {"dim": dim}))
        elif i < sizes[dim]:
            missing += 1
    value = pieces[0] if len(pieces) == 1 else ix.add("cat", pieces, {"dim": dim})
    ix.scatters[value] = (sizes, dim, parts)
    return value


def scatter_sum(ix: Importer, x: Value, y: Value) -> Value | None:
    """`x + y` as one `cat` where both are `scattered` into one shape along one dim at
    different indices; else None."""
    if x not in ix.scatters or y not in ix.scatters:
        return None
    (sizes, dim, parts), (other_sizes, other_dim, others) = ix.scatters[x], ix.scatters[y]
    if (sizes, dim) != (other_sizes, other_dim) or parts.keys() & others.keys():
        return None
    return scattered(ix, sizes, dim, {**parts, **others})


GRADIENT_OPS = {"select_backward": select_backward}
