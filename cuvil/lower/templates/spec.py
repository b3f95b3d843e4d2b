"""What a kernel generator returns: the text of one kernel and what to pass it."""

from __future__ import annotations

from dataclasses import dataclass, field

from cuvil.errors import CuvilError
from cuvil.ir.types import Dim, DType

# fastmath flag sets generated kernels use. No `nnan`/`ninf` where -inf masks must survive.
FASTMATH = {
    "fast": '{"nsz", "arcp", "contract", "afn", "reassoc"}',
    "rows": '{"nsz", "arcp", "contract", "afn", "reassoc", "nnan"}',
}


# The argument value that stands for the thread count of the call (an int).
THREADS = "#threads"
# The thread count a library kernel gets on a serial target (`Target.threaded`).
ONE_THREAD = "#one_thread"


class Unsupported(CuvilError):
    """A template cannot lower this group; the group falls back (or is split)."""


@dataclass
class Scratch:
    """A temporary a kernel needs during its call, planned like any intermediate."""

    dtype: DType
    shape: tuple[Dim | str, ...]  # dims; the string "threads" is the thread count


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
