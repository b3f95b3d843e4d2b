"""What a user asks of quantization, and the calibration facts it gives the optimizer.

    fn = cuvil.compile(model, inputs, quantize=cuvil.Quantize(calibration=batches))

`Quantize.annotate(graph)` runs the fp32 graph in the reference executor over the
calibration batches, observes every floating value (`calibrate`) and records, per value,
what the rules of `rules/quantize/` read: `absmax(x)`, `scale(x)` and `zero_point(x)` (u8,
affine), and `calibrated(x)`. Weights need no facts: `qweight` rounds a constant weight
per output channel when it folds. The rules then say what may become int8 and the cost
model decides what does.

`Quantize(activations="fp16")` needs no calibration batches: an f16 value needs no scale.
It is accepted where a target of the compile computes f16 (`Device.half_kernels`, the
CUDA target's), checked against the targets by `check_targets`; its `annotate` marks every
floating value `half_ok(x)`, which the fp16 rules of such a target read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cuvil.errors import CuvilError
from cuvil.ir.graph import Graph
from cuvil.ops.quantized import affine_qparams
from cuvil.quantize.ranges import METHODS, calibrate

WEIGHTS = ("int8",)
ACTIVATIONS = ("int8", "fp16")
# Why fp16 activations are refused where no target computes f16 (docs/how-to/
# quantize-a-model.md, "fp16").
NO_FP16 = ("Quantize: activations='fp16' needs a target with f16 kernels (target='cuda'); "
           "the CPU target's kernels are Numba's, which has no float16 type on the CPU (it "
           "cannot compile a kernel that reads or writes f16), so there is no fp16 kernel "
           "for extraction to choose")


@dataclass(frozen=True)
class Quantize:
    """INT8 compilation driven by calibration.

    `calibration`: batches of example inputs (each a tuple of inputs, or one tensor), read
    once; `method`: "minmax", "percentile" or "entropy" (as ONNX Runtime's calibrators);
    `per_channel`: weight scales per output channel (the only form so far); `weights`:
    "int8"; `activations`: "int8", or "fp16" (f16 layers with f32 accumulation, weights
    rounded to f16; no calibration batches needed, `weights` is not read).
    """

    calibration: Iterable[Any] = ()
    method: str = "minmax"
    per_channel: bool = True
    weights: str = "int8"
    activations: str | None = "int8"
    percentile: float = 99.99

    def __post_init__(self):
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

    @property
    def half(self) -> bool:
        """Whether f16 layers are asked for."""
        return self.activations == "fp16"

    def check_targets(self, targets: Iterable[str]) -> None:
        """A one-line `CuvilError` when f16 is asked for and no target computes it."""
        from cuvil.ir.devices import computes_half

        if self.half and not any(computes_half(t) for t in targets):
            raise CuvilError(NO_FP16)

    def annotate(self, graph: Graph) -> Graph:
        """A copy of `graph` whose floating values carry their facts: calibration's for
        int8, `half_ok` for fp16."""
        if self.half:
            return _mark_half(graph)
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


def _mark_half(graph: Graph) -> Graph:
    """A copy of `graph` whose floating values, constants aside, may become f16."""
    out = graph.copy()
    out.report = graph.report
    out.facts = {n.name: {"half_ok": True} for n in graph
                 if n.op not in ("const", "scalar") and n.type.dtype.is_float}
    return out
