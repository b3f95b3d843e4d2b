"""`CpuTarget`: Numba on the host CPU, its generators by template family, and the import
block of its generated modules (numpy, Numba, and the shared helpers a kernel calls)."""

from __future__ import annotations

from dataclasses import dataclass

from cuvil.lower.target import Target
from cuvil.targets.cpu import PARAMS
from cuvil.targets.cpu.helpers import HELPERS, helper_text, used_helpers
from cuvil.targets.cpu.templates import (
    attention,
    conv,
    elementwise,
    gemm,
    heads,
    indexing,
    mlp,
    movement,
    pool,
    qconv,
    qgemm,
    recurrent,
    reduction,
)

GENERATORS = {"elementwise": elementwise.generate, "gemm": gemm.generate,
              "rows": reduction.generate, "conv": conv.generate, "pool": pool.generate,
              "attention": attention.generate, "concat": movement.generate,
              "gather": movement.generate, "source": movement.generate,
              "recurrent": recurrent.generate, "scan": indexing.generate,
              "index": indexing.generate, "qgemm": qgemm.generate, "qconv": qconv.generate,
              "mlp": mlp.generate}


@dataclass
class CpuTarget(Target):
    """Numba on the host CPU (see `cuvil.targets.cpu`)."""

    name: str = "cpu"
    gflops: float = PARAMS["gflops"]
    gbps: float = PARAMS["gbps"]
    launch_us: float = PARAMS["launch_us"]

    def __post_init__(self):
        if not self.generators:
            self.generators = dict(GENERATORS)

    def attention_matcher(self):
        return attention.match

    def regroup(self, groups: list, graph, own) -> list:
        """Attention groups hold the head splits and merge of their operands."""
        return heads.heads_in_place(groups, graph, own)

    @property
    def helpers(self) -> dict[str, str]:
        return dict(HELPERS)

    def imports(self, body: str) -> str:
        """The import block of a generated module whose code is `body`."""
        lines = ["import math\n"] if "math." in body else []
        lines.append("import numpy as np")
        names = [n for n in ("njit", "prange") if f"{n}(" in body]
        if names:
            lines.append(f"from numba import {', '.join(names)}")
        lines += helper_text(used_helpers(body))
        return "\n".join(lines) + "\n"
