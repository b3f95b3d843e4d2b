"""What a kernel generator returns: the text of one kernel and what to pass it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from cuvil.errors import CuvilError
from cuvil.ir.types import Dim, DType

# fastmath flag sets generated kernels use: never `nnan` or `ninf`, so that NaN and +-inf
# propagate as in torch (and -inf masks survive).
FASTMATH = {
    "fast": '{"nsz", "arcp", "contract", "afn", "reassoc"}',
    "rows": '{"nsz", "arcp", "contract", "afn", "reassoc"}',
}


# The argument value that stands for the thread count of the call (an int).
THREADS = "#threads"
# The thread count a library kernel gets on a serial target (`Target.threaded`).
ONE_THREAD = "#one_thread"


class Unsupported(CuvilError):
    """A template cannot lower this group; the group falls back (or is split)."""


# Bytes left unused after each thread's row of scratch (`Scratch.rows`).
ROW_GAP = 1 << 15


@dataclass
class Scratch:
    """A temporary a kernel needs during its call, planned like any intermediate."""

    dtype: DType
    shape: tuple[Dim | str, ...]  # dims; the string "threads" is the thread count

    @classmethod
    def rows(cls, dtype: DType, *row: Dim) -> Scratch:
        """A row [*row] per thread, for a driver that uses the start of its row and never
        its shape: the row lengthened (its first dim) by at least `ROW_GAP` bytes. Two
        threads each rewriting and rereading their own row ran 8-9% slower when the rows
        lay within 4-12 KiB of each other than 20 KiB or more apart (the CNN's 3x3 layer on
        16 images; the whole CNN 13-17%: docs/performance.md, "Where the time goes"). A
        symbolic row of two dims or more stays as it is."""
        first, rest = row[0], math.prod(row[1:])
        if isinstance(rest, int):
            first = first + -(-ROW_GAP // (rest * dtype.itemsize))
        return cls(dtype, ("threads", first, *row[1:]))


@dataclass
class KernelSpec:
    """A kernel body and its parameters; `args[i]` is the value passed as `params[i]`.

    The output is the last parameter, `out`. Calls of shared functions (`templates.helpers`)
    in the body are imported by the module automatically. A `python` kernel is numpy code
    (whole-array copies such as a transpose or a concatenation), which needs no compiling.
    """

    template: str
    params: list[str]
    args: list[str]
    body: list[str]
    parallel: bool = True
    fastmath: str = "fast"
    scratch: dict[str, Scratch] = field(default_factory=dict)
    note: str = ""
    python: bool = False  # plain numpy code: nothing to compile
    target: str = ""  # the target that generated it (set by lowering; "" = the graph's)
    library: str = ""  # a runtime driver (`templates.helpers`) that is the kernel: no body
    launch: str = ""  # launch arguments, written where a target's decorator has `{launch}`
