"""Quantization-aware compilation: calibration, and the facts it gives the rules.

`Quantize` is what a user asks for (`cuvil.compile(..., quantize=cuvil.Quantize(...))`);
its `annotate` calibrates a graph (`calibrate`: a `Range` per value, by min/max,
percentile or entropy) and records each value's int8 facts, which the rules of
`rules/quantize/` read (`calibrated(x)`, `scale(x)`, ...). `weight_range` gives a weight's
per-output-channel range.
"""

from cuvil.quantize.calibrate import METHODS, Observer, Range, calibrate, weight_range
from cuvil.quantize.config import Quantize

__all__ = ["METHODS", "Observer", "Quantize", "Range", "calibrate", "weight_range"]
