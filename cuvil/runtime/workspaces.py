"""What a compiled graph keeps per set of input shapes, and the buffers each call owns.

A `ShapePlan` is made once per set of input shapes and dtypes: the sizes of the symbolic
dims, the outputs' shapes, the fallbacks bound to those sizes, the entry's trailing
arguments. It is read, never written, by the calls that use it, from any thread.

The planned buffers (intermediates and per-thread scratch rows, `CallSpec.allocate`) are
a `Workspace`'s, not the plan's. A call takes a free workspace from the plan's pool
(`ShapePlan.take`: a list's `pop`, atomic under the GIL), or allocates one when every
workspace is in use by another call, runs `entry` on it and puts it back (`give`). No two
running calls share a buffer, so calls from several threads run at once without a lock;
a plan holds as many workspaces as calls ever ran on it at the same time, and one thread
calling again and again reuses one. A call that raises does not put its workspace back.

A workspace also keeps its own recycled output arrays (outputs past `FRESH_BYTES`): a set
is reused only when nothing refers to its arrays any more, neither a returned tensor nor
any view of it (a view keeps the tensor's storage, which keeps the array), nor a call
that took it and has not wrapped it yet (`output_arrays` hands out a new list, whose
references count). A fresh 40 MB array costs ~12 ms of page faults here, a recycled one
nothing; smaller outputs are new arrays each call.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

KEEP_OUTPUTS = 2  # output sets kept per workspace (`y = f(x)` holds one while making the next)
FRESH_BYTES = 1 << 16  # outputs this small are new arrays each call: the heap reuses
# freed memory (no page faults), and 1.3 us of reference checks after a kernel that
# streamed its weights through the cache become 0.3


def _free_refcount() -> int | None:
    """`sys.getrefcount` of an array held only by a list, seen as `output_arrays` sees it;
    None (never recycle) if this Python does not count one more for another holder."""
    arrays = [np.empty(1)]
    free = next(sys.getrefcount(a) for a in arrays)
    held = arrays[0]  # noqa: F841 (one more reference)
    return free if next(sys.getrefcount(a) for a in arrays) > free else None


_FREE = _free_refcount()


class Workspace:
    """One call's planned buffers, and the output sets recycled through them."""

    __slots__ = ("buffers", "outputs", "pre", "recycle", "spare")

    def __init__(self, pre: tuple, buffers: list, outputs: list, recycle: bool):
        self.pre = pre  # the entry's arguments between the inputs and the outputs
        self.buffers = buffers
        self.outputs = outputs  # [(shape, dtype)]
        self.recycle = recycle  # False: outputs are new arrays each call
        self.spare: list[list[np.ndarray]] = []

    def output_arrays(self) -> list[np.ndarray]:
        """A set of output arrays that nothing outside this workspace refers to."""
        if not self.recycle:
            return [np.empty(shape, dtype) for shape, dtype in self.outputs]
        for arrays in self.spare:
            if _FREE is not None and all(sys.getrefcount(a) == _FREE for a in arrays):
                return list(arrays)  # a list of its own: these count as held until dropped
        arrays = [np.empty(shape, dtype) for shape, dtype in self.outputs]
        self.spare = [*self.spare[-(KEEP_OUTPUTS - 1):], arrays]
        return list(arrays)


class ShapePlan:
    """The calls of one set of input shapes: `take` a workspace, call, `give` it back."""

    def __init__(self, spec, env: dict[str, int], consts: tuple, threads: int,
                 fallbacks: list):
        self.env = env
        self.outputs = spec.output_shapes(env)
        self.symbols = tuple(env[s] for s in spec.symbols)
        self.fallbacks = fallbacks
        self.post = (*self.symbols, threads, fallbacks)  # the entry's last arguments
        self.fresh = sum(int(np.prod(s)) * np.dtype(d).itemsize
                         for s, d in self.outputs) <= FRESH_BYTES
        self._spec, self._consts, self._threads = spec, consts, threads
        self.free = [self.workspace()]  # the workspaces no call holds now

    def workspace(self) -> Workspace:
        """A new workspace: the planned buffers allocated for these sizes."""
        buffers = self._spec.allocate(self.env, self._threads)
        return Workspace((*self._consts, *buffers), buffers, self.outputs, not self.fresh)

    def take(self) -> Workspace:
        try:
            return self.free.pop()
        except IndexError:  # every workspace is in use by another call
            return self.workspace()

    def give(self, work: Workspace) -> None:
        self.free.append(work)

    @property
    def buffers(self) -> list[Any]:
        """A free workspace's planned buffers (for inspection)."""
        work = self.take()
        self.give(work)
        return work.buffers
