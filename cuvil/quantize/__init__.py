"""Quantization-aware compilation (issue 12, in progress): calibration first.

`calibrate` observes a graph's values over calibration batches and gives each one a
`Range`, whose `qparams` are the int8 scale and zero point; `weight_range` gives a weight's
per-output-channel range. The quantization rules (`rules/quantize/`) and int8 kernels that
will read these facts are not written yet.
"""

from cuvil.quantize.calibrate import METHODS, Observer, Range, calibrate, weight_range

__all__ = ["METHODS", "Observer", "Range", "calibrate", "weight_range"]
