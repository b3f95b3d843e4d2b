"""What a user asks of quantization, and the calibration facts it gives the optimizer.

    fn = cuvil.compile(model, inputs, quantize=cuvil.Quantize(calibration=batches))

`Quantize.annotate(graph)` runs the fp32 graph in the reference executor over the
calibration batches, observes every floating value (`calibrate`) and records, per value,
what the rules of `rules/quantize/` read: `absmax(x)`, `scale(x)` and `zero_point(x)` (u8,
affine), and `calibrated(x)`. Weights need no facts: `qweight` rounds a constant weight
per output channel when it folds. The rules then say what may become int8 and the cost
model decides what does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cuvil.errors import CuvilError
from cuvil.ir.graph import Graph
from cuvil.ops.quantized import affine_qparams
from cuvil.quantize.calibrate import METHODS, calibrate

WEIGHTS = ("int8",)
ACTIVATIONS = ("int8",)
# Why fp16 activations are refused: no CPU kernel could compute them (docs/how-to/
# quantize-a-model.md, "fp16").
NO_FP16 = ("Quantize: activations='fp16' is not supported: the CPU target's kernels are "
           "Numba's, which has no float16 type on the CPU (it cannot compile a kernel that "
           "reads or writes f16), so there is no fp16 kernel for extraction to choose")


@dataclass(frozen=True)
class Quantize:
    """INT8 compilation driven by calibration.

    `calibration`: batches of example inputs (each a tuple of inputs, or one tensor), read
    once; `method`: "minmax", "percentile" or "entropy" (as ONNX Runtime's calibrators);
    `per_channel`: weight scales per output channel (the only form so far); `weights` and
    `activations`: "int8".
    """

    calibration: Iterable[Any]
    method: str = "minmax"
    per_channel: bool = True
    weights: str = "int8"
    activations: str | None = "int8"
    percentile: float = 99.99

    def __post_init__(self):
        if self.activations == "fp16":
            raise CuvilError(NO_FP16)
        for name, value, known in (("method", self.method, METHODS),
                                   ("weights", self.weights, WEIGHTS),
                                   ("activations", self.activations, ACTIVATIONS)):
            if value not in known:
                raise CuvilError(f"Quantize: {name}={value!r} is not supported (supported: "
                                 f"{', '.join(map(repr, known))})")
        if not self.per_channel:
            raise CuvilError("Quantize: per_channel=False (one scale per weight) is not "
                             "supported; weights are scaled per output channel")
        object.__setattr__(self, "calibration", tuple(self.calibration))

    def annotate(self, graph: Graph) -> Graph:
        """A copy of `graph` whose floating values carry their calibration facts."""
        ranges = calibrate(graph, self.calibration, self.method, self.percentile)
        consts = {n.name for n in graph if n.op in ("const", "scalar")}
        out = graph.copy()
        out.report = graph.report
        out.facts = {}
        for name, r in ranges.items():
            if name in consts or r.lo.dim():
                continue
            lo, hi = float(r.lo), float(r.hi)
            scale, zero = affine_qparams(lo, hi)
            out.facts[name] = {"absmax": max(abs(lo), abs(hi)), "scale": scale,
                               "zero_point": zero}
        return out
