"""`cuvil.egraph.precision`: a precision line compares the int8 and fp32 costs as they are
(never "dearer" of the cheaper one), and the int8 cost includes quantizing its activations,
as extraction pays it."""

from __future__ import annotations

import pytest

import cuvil
from cuvil.egraph.precision import Alternative, PrecisionChoice


def choice(chosen: str, int8: float, fp32: float | None) -> str:
    alt = Alternative("linear", fp32) if fp32 is not None else None
    return str(PrecisionChoice("add_1", "", chosen, Alternative("qlinear", int8, "r"), alt))


def test_each_line_compares_the_costs_it_prints():
    assert "fp32 linear 3.0 us kept: int8 qlinear 4.0 us is dearer" in choice("fp32", 4.0, 3.0)
    kept = choice("fp32", 2.4, 3.0)
    assert "dearer" not in kept and "kept though int8 qlinear 2.4 us is cheaper here" in kept
    assert "int8 qlinear 2.4 us < fp32 linear 3.0 us" in choice("int8", 2.4, 3.0)
    chosen = choice("int8", 4.0, 3.0)
    assert " < " not in chosen and "chosen though fp32 linear 3.0 us is cheaper here" in chosen
    assert "int8 qlinear 3.0 us = fp32 linear 3.0 us" in choice("int8", 3.04, 2.96)
    assert "no fp32 form" in choice("fp32", 2.0, None)


def test_the_digits_cnn_report_says_what_its_costs_say():
    pytest.importorskip("sklearn")
    from cuvil.zoo import digits

    d = digits.digits_cnn()
    q = cuvil.Quantize(calibration=d.calibration(batches=2))
    graph = cuvil.optimize(d.model, (d.x_test[:1],), quantize=q)
    assert graph.report.precision
    for c in graph.report.precision:
        text = str(c)
        if "is dearer" in text:
            assert c.chosen == "fp32" and c.low.cost > c.fp32.cost
        if " < " in text:
            assert c.chosen == "int8" and c.low.cost < c.fp32.cost
        if "kept" in text:  # extraction kept fp32 at batch 1: its int8 form is dearer
            assert "is dearer" in text
