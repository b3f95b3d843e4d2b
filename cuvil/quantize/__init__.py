"""Quantization-aware compilation: calibration, and the facts it gives the rules.

`Quantize` is what a user asks for (`cuvil.compile(..., quantize=cuvil.Quantize(...))`);
its `annotate` calibrates a graph (`ranges.calibrate`: a `Range` per value, by min/max,
percentile or entropy) and records each value's int8 facts, which the rules of
`rules/quantize/` read (`calibrated(x)`, `scale(x)`, ...). `weight_range` gives a weight's
per-output-channel range.

Names load on first use: the pipeline imports this package at the top, and a compile
without quantization never loads the IR (sympy) through it.
"""

__all__ = ["METHODS", "Observer", "Quantize", "Range", "calibrate", "weight_range"]


def __getattr__(name: str):
    if name == "Quantize":
        from cuvil.quantize.config import Quantize

        return Quantize
    if name not in __all__:
        raise AttributeError(f"module 'cuvil.quantize' has no attribute {name!r}")
    from cuvil.quantize import ranges

    return getattr(ranges, name)
