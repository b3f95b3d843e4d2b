"""`cuda_kernel`: a generated kernel compiled with `numba.cuda.jit` and launched over its
output (the last argument): `BLOCK` threads a block (or the kernel's own `block`), enough
blocks to give every output element a thread, or every `per_block` elements a block (a
tiled kernel's output tile; at most `MAX_BLOCKS`); the kernels loop grid-stride, so any
grid is correct. The launcher looks like a Numba dispatcher to `compile_graph` (`compile(sig)`,
`overloads`, `stats.cache_hits`): on a GPU it compiles eagerly for the call's types; under
the simulator there is nothing to compile.

CUDA graphs are not used yet, on purpose. numba-cuda 0.30.4 can capture them: a launch
takes a `cuda.core` `GraphBuilder` as its stream (`builder = Device().create_graph_builder()`,
`builder.begin_building()`, `kernel[grid, block, builder](...)`,
`builder.end_building().complete().launch(stream)`; its own test
`test_cuda_core_graph_builder_launch_user_facing`). What stops it here: (1) the simulator
has no graphs (`numba.cuda.simulator` takes stream 0 only) and the sessions that built this
had no GPU, so capture code would ship unverified; (2) a call's device boundaries are
synchronous copies from pageable numpy arrays (`memory.transfer`), which stream capture
cannot record, so a graph could only hold a run of kernels between two transfers: the
launcher would have to defer its launches until the next transfer (or fallback, or
`synchronize`), key each run on its kernels and the device pointers of the planned
buffers (fixed per compiled graph and shape), and launch the completed graph on the legacy
default stream so that it stays ordered with the copies. Runs of one kernel would gain
nothing (a graph pays for launch overhead only when it replaces several launches).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from numba import config, cuda

from cuvil.errors import CuvilError

BLOCK = 256  # threads a block, unless the kernel says its own
MAX_BLOCKS = 65536


def simulated() -> bool:
    """Whether kernels run under Numba's CUDA simulator (`NUMBA_ENABLE_CUDASIM=1`)."""
    return bool(config.ENABLE_CUDASIM)


def synchronize() -> None:
    """Wait for every kernel launched so far (profiling times each step this way)."""
    cuda.synchronize()


def require_gpu() -> None:
    """A `CuvilError` in one line unless a GPU (or the simulator) runs CUDA kernels."""
    if not simulated() and not cuda.is_available():
        raise CuvilError("numba.cuda finds no GPU here to run values on cuda; "
                         "compile for 'cpu', or set NUMBA_ENABLE_CUDASIM=1 to simulate one")


class CudaLauncher:
    """A `numba.cuda` kernel and its launch configuration."""

    def __init__(self, fn, fastmath, block: int = BLOCK, per_block: int = 0):
        self.py_func = fn
        self.block, self.per_block = block, per_block or block
        # cache=True: the kernel's module is a file named by its text, so Numba's on-disk
        # cache of the compiled kernel is valid in every later process
        self.kernel = cuda.jit(fastmath=bool(fastmath), cache=True)(fn)
        self.overloads: dict = {}
        self.stats = SimpleNamespace(cache_hits={})
        self.__name__ = fn.__name__

    def compile(self, sig) -> None:
        if not simulated() and sig not in self.overloads:
            self.kernel.compile(sig)
        self.overloads[sig] = True

    def grid(self, n: int) -> int:
        return max(1, min(math.ceil(n / self.per_block), MAX_BLOCKS))

    def __call__(self, *args) -> None:
        self.kernel[self.grid(args[-1].size), self.block](*args)


def cuda_kernel(fastmath=False, block: int = BLOCK, per_block: int = 0):
    """The decorator of a generated CUDA kernel (see the module docstring): `block`
    threads a block, a block per `per_block` output elements (default: one a thread)."""

    def wrap(fn) -> CudaLauncher:
        return CudaLauncher(fn, fastmath, block, per_block)

    return wrap
