"""`CUVIL_CHECK_WRITES=1`: every call of a compiled graph checks what it wrote.

The runtime writes only its own buffers: the workspaces' planned buffers and the outputs
it returns. It never writes a caller's tensor or a constant (a model's weight, or an array
derived from one), except the inputs the model itself writes in place, which the program
declares (`CallSpec.writes`, the graph's mutations) and the call writes back. With the
variable set when `cuvil.runtime.compiled` is imported (it is read once), every compiled
graph made afterwards copies each caller tensor and each constant before a call and
compares their bytes after it; any that changed and is not declared written is a
`CuvilError` naming it. The copies make calls slower by a copy of every input and weight:
this is a debugging switch, for a runtime suspected of writing what it does not own (a
kernel, or a torch fallback whose op writes an input).

    check_writes(compiled)     # the same, for one compiled graph
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import numpy as np
import torch

from cuvil.errors import CuvilError


def check_writes(compiled) -> None:
    """Make every call of `compiled` check that it wrote nothing it does not own."""
    compiled.__class__ = _checked_class(type(compiled))


@cache
def _checked_class(base: type) -> type:
    class Checked(base):
        def __call__(self, *inputs: Any) -> Any:
            with watched(self, inputs):
                return super().__call__(*inputs)

    Checked.__name__ = Checked.__qualname__ = base.__name__
    return Checked


@contextmanager
def watched(compiled, inputs: tuple) -> Iterator[None]:
    """Raise, after the block, if it changed a caller tensor or a constant of `compiled`
    that the program does not declare written."""
    before = [(name, x, _bytes(x).copy()) for name, x in _owned_elsewhere(compiled, inputs)]
    yield
    changed = [name for name, x, copy in before if not np.array_equal(_bytes(x), copy)]
    if changed:
        raise CuvilError(f"{compiled._spec.name}: the call wrote {', '.join(changed)}, which "
                         "the program does not write (CUVIL_CHECK_WRITES)")


def _owned_elsewhere(compiled, inputs: tuple) -> Iterator[tuple[str, Any]]:
    """(name, tensor or array) of each caller tensor the program does not write, then of
    each constant; anything the call itself refuses (not a tensor or array, a tensor on
    another device or of a dtype numpy lacks) is left to it."""
    spec = compiled._spec
    written = {position for position, _ in getattr(spec, "writes", ())}
    for i, (param, x) in enumerate(zip(spec.params, inputs, strict=False)):
        if i not in written and _host(x) is not None:
            yield f"input {param.name!r}", x
    for i, const in enumerate(compiled._consts):
        if _host(const) is not None:
            yield f"constant {i} ({const.dtype}{list(const.shape)})", const


def _host(x: Any) -> np.ndarray | None:
    """The memory of a CPU tensor or numpy array, or a device array's copy on the host."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, torch.Tensor):
        try:
            return x.detach().resolve_conj().numpy() if x.is_cpu else None
        except (RuntimeError, TypeError):
            return None
    return x.copy_to_host() if hasattr(x, "copy_to_host") else None


def _bytes(x: Any) -> np.ndarray:
    """The elements of `x` as bytes, in order (a NaN compares equal to itself)."""
    return np.ascontiguousarray(_host(x)).reshape(-1).view(np.uint8)
