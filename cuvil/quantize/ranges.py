"""Calibration: the range of every value of a graph over calibration batches, and the int8
scale and zero point each range gives.

    ranges = calibrate(graph, batches, method="minmax")     # value name -> Range
    scale, zero_point = ranges["v3"].qparams("i8")

Methods, as ONNX Runtime's calibrators define them:

    minmax      the smallest and largest value seen
    percentile  symmetric: the `percentile`-th percentile of |x| (99.99 by default), read
                off a histogram of |x| over all batches
    entropy     symmetric: the clipping threshold whose 128-level quantized histogram is
                closest (KL divergence) to the observed one (TensorRT's method)

Ranges are per tensor, or per channel along `axis` (weights: per output channel, axis 0).
The graph runs in the reference executor; every value is observed, batch by batch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.stats
import torch

from cuvil.errors import CuvilError
from cuvil.ir.graph import Graph
from cuvil.ops.execute import evaluate

METHODS = ("minmax", "percentile", "entropy")
LEVELS = {"i8": (-128, 127), "u8": (0, 255)}
BINS = 2048


@dataclass(frozen=True)
class Range:
    """`lo` and `hi` as tensors: 0-d per tensor, 1-d per channel."""

    lo: torch.Tensor
    hi: torch.Tensor

    @property
    def absmax(self) -> torch.Tensor:
        return torch.maximum(self.lo.abs(), self.hi.abs())

    def qparams(self, dtype: str = "i8", symmetric: bool | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """(scale, zero_point) mapping this range onto `dtype`'s levels; symmetric (zero
        point 0) by default for i8, affine for u8. Zero is always exactly representable."""
        if dtype not in LEVELS:
            raise CuvilError(f"cannot quantize to {dtype!r}: expected one of {sorted(LEVELS)}")
        qmin, qmax = LEVELS[dtype]
        if symmetric if symmetric is not None else dtype == "i8":
            middle = (qmin + qmax + 1) // 2
            scale = self.absmax / (qmax - middle)
            zero = torch.full_like(scale, middle, dtype=torch.int64)
        else:
            lo, hi = torch.clamp(self.lo, max=0), torch.clamp(self.hi, min=0)
            scale = (hi - lo) / (qmax - qmin)
            zero = (qmin - torch.round(lo / _nonzero(scale))).to(torch.int64)
        return _nonzero(scale), zero


@dataclass
class Observer:
    """Accumulates one value's range over batches, with the histogram of |x| that the
    percentile and entropy methods read."""

    method: str = "minmax"
    axis: int | None = None
    percentile: float = 99.99
    lo: torch.Tensor | None = None
    hi: torch.Tensor | None = None
    hist: np.ndarray = field(default_factory=lambda: np.zeros(BINS))
    top: float = 0.0  # the histogram's upper edge

    def update(self, x: torch.Tensor) -> None:
        x = x.detach().to(torch.float64)
        dims = [d for d in range(x.dim()) if d != self.axis] if self.axis is not None else None
        lo = x.amin(dim=dims) if dims is not None else x.min()
        hi = x.amax(dim=dims) if dims is not None else x.max()
        self.lo = lo if self.lo is None else torch.minimum(self.lo, lo)
        self.hi = hi if self.hi is None else torch.maximum(self.hi, hi)
        if self.method != "minmax":
            self._histogram(x.abs().flatten().numpy())

    def _histogram(self, a: np.ndarray) -> None:
        top = float(a.max()) if a.size else 0.0
        if top > self.top:  # widen: old counts move to the bins of the new, wider edges
            if self.top > 0:
                edges = np.linspace(0, self.top, BINS + 1)
                centers = (edges[:-1] + edges[1:]) / 2
                self.hist = np.histogram(centers, BINS, (0, top), weights=self.hist)[0]
            self.top = top
        if self.top > 0:
            self.hist += np.histogram(a, BINS, (0, self.top))[0]

    def range(self) -> Range:
        if self.lo is None:
            raise CuvilError("no calibration batch was observed")
        if self.method == "minmax" or self.axis is not None:
            return Range(self.lo.float(), self.hi.float())
        t = (percentile_threshold(self.hist, self.top, self.percentile)
             if self.method == "percentile" else entropy_threshold(self.hist, self.top))
        limit = torch.tensor(t, dtype=torch.float32)
        return Range(torch.maximum(self.lo.float(), -limit), torch.minimum(self.hi.float(), limit))


def percentile_threshold(hist: np.ndarray, top: float, percentile: float) -> float:
    """The upper edge of the bin where the cumulative share of |x| reaches `percentile`."""
    cdf = np.cumsum(hist) / max(hist.sum(), 1)
    index = int(np.searchsorted(cdf, percentile / 100.0))
    return top * min(index + 1, len(hist)) / len(hist)


def entropy_threshold(hist: np.ndarray, top: float, levels: int = 128) -> float:
    """The threshold whose `levels`-level quantization of the histogram loses least
    information, as TensorRT and ONNX Runtime compute it: P is the histogram below the
    threshold with the outliers added to its last bin; Q is the same bins (without the
    outliers) merged into `levels` groups, each group's count spread over the bins where P
    is not zero; both are smoothed, and the smallest KL(P || Q) wins."""
    best, best_kl = len(hist), np.inf
    for i in range(levels, len(hist) + 1, 16):
        sliced = hist[:i].astype(np.float64)
        p = sliced.copy()
        p[-1] += hist[i:].sum()
        q = _spread(sliced, p != 0, levels)
        p, q = _smooth(p), _smooth(q)
        if p is None or q is None:
            continue
        kl = float(scipy.stats.entropy(p, q))
        if kl < best_kl:
            best, best_kl = i, kl
    return top * best / len(hist)


def _spread(counts: np.ndarray, nonzero: np.ndarray, levels: int) -> np.ndarray:
    out = np.zeros(len(counts))
    for group in np.array_split(np.arange(len(counts)), levels):
        n = nonzero[group].sum()
        if n:
            out[group] = np.where(nonzero[group], counts[group].sum() / n, 0.0)
    return out


def _smooth(dist: np.ndarray, eps: float = 1e-4) -> np.ndarray | None:
    """Zero bins get `eps`, taken evenly from the others (None: nothing to smooth)."""
    zeros = dist == 0
    if zeros.all():
        return None
    taken = eps * zeros.sum() / (~zeros).sum()
    return dist + np.where(zeros, eps, -taken)


def calibrate(graph: Graph, batches: Iterable[Any], method: str = "minmax",
              percentile: float = 99.99) -> dict[str, Range]:
    """The range of every floating value of `graph` over `batches` (each a tuple of inputs,
    or one tensor), per tensor."""
    if method not in METHODS:
        raise CuvilError(f"unknown calibration method {method!r}; known: {', '.join(METHODS)}")
    observers: dict[str, Observer] = {}
    seen = 0
    with torch.no_grad():
        for batch in batches:
            inputs = batch if isinstance(batch, tuple | list) else (batch,)
            for name, value in evaluate(graph, tuple(inputs)).items():
                if value.is_floating_point() and value.numel():
                    observers.setdefault(name, Observer(method, None, percentile)).update(value)
            seen += 1
    if not seen:
        raise CuvilError("calibration needs at least one batch")
    return {name: obs.range() for name, obs in observers.items()}


def weight_range(weight: torch.Tensor, axis: int | None = 0) -> Range:
    """A weight's range: per output channel (`axis` 0) by default, per tensor with None."""
    observer = Observer("minmax", axis)
    observer.update(weight)
    return observer.range()


def _nonzero(scale: torch.Tensor) -> torch.Tensor:
    """A constant-zero range still needs a positive scale."""
    return torch.where(scale > 0, scale, torch.ones_like(scale)).to(torch.float32)
