"""Comparing the two sides: types exactly, values within the tolerance of the least precise
dtype of the left side, scaled by the magnitude of the values it went through."""

from __future__ import annotations

import math

import torch

from cuvil.ir import DType, TensorType
from cuvil.verify.compare import (
    TOLERANCES,
    compare_types,
    compare_values,
    magnitude,
    tolerance,
)

F32 = TOLERANCES[DType.f32]


def test_types_must_be_equal_in_shape_dtype_layout_and_device():
    t = TensorType((2, 3, 4, 4), "f32")
    assert compare_types(t, TensorType((2, 3, 4, 4), "f32")) is None
    for other, word in [(t.with_(shape=(2, 3, 4, 5)), "f32[2,3,4,5]"),
                        (t.with_(dtype=DType.f16), "f16"),
                        (t.with_(layout="NHWC"), "layout NCHW vs NHWC"),
                        (t.with_(device="cuda"), "device cpu vs cuda")]:
        mismatch = compare_types(t, other)
        assert word in mismatch.what and mismatch.error == math.inf


def test_float_values_within_tolerance_agree_and_beyond_do_not():
    a = torch.tensor([1.0, -2.0, 1000.0])
    assert compare_values(a, a * (1 + 5e-5), F32, 1.0) is None  # within rtol
    assert compare_values(a, a * (1 + 5e-4), F32, 1.0) is not None
    small = torch.tensor([1e-6, 0.0])
    assert compare_values(small, small + 5e-6, F32, 1.0) is None  # within atol
    assert compare_values(small, small + 5e-5, F32, 1.0) is not None
    assert compare_values(small, small + 5e-5, F32, 10.0) is None  # big intermediates


def test_the_worst_element_is_named():
    left, right = torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[1.0, 2.5], [3.0, 4.0]])
    mismatch = compare_values(left, right, F32, 1.0)
    assert mismatch.what == "max error 0.5; at (0, 1): left 2, right 2.5"
    assert mismatch.error == 0.5


def test_nan_and_infinity_must_match_exactly():
    nan, inf = float("nan"), float("inf")
    a = torch.tensor([nan, inf, -inf, 1.0])
    assert compare_values(a, a.clone(), F32, 1.0) is None
    for i, value in [(0, 0.0), (1, -inf), (2, 1e30), (3, nan)]:
        b = a.clone()
        b[i] = value
        assert compare_values(a, b, F32, 1.0).error == math.inf


def test_integers_and_booleans_are_exact():
    a = torch.tensor([1, 2, 3])
    assert compare_values(a, a.clone(), (0.0, 0.0), 1.0) is None
    assert compare_values(a, a + torch.tensor([0, 0, 1]), (0.0, 0.0), 1.0).error == 1.0
    assert compare_values(torch.tensor([True]), torch.tensor([False]), (0.0, 0.0), 1.0)


def test_shapes_or_dtypes_of_the_values_differ():
    assert "shape or dtype" in compare_values(torch.zeros(2), torch.zeros(3), F32, 1.0).what
    assert compare_values(torch.zeros(2), torch.zeros(2, dtype=torch.float64), F32, 1.0)


def test_tolerance_follows_the_least_precise_float_and_scale_the_largest_value():
    f32, f16 = torch.zeros(2), torch.zeros(2, dtype=torch.float16)
    assert tolerance([f32, torch.zeros(2, dtype=torch.float64)]) == F32
    assert tolerance([f32, f16]) == TOLERANCES[DType.f16]
    assert tolerance([torch.tensor([1, 2])]) == (0.0, 0.0)
    assert magnitude([torch.tensor([0.5]), torch.tensor([-3.0, float("inf")])]) == 3.0
    assert magnitude([torch.tensor([0.25])]) == 1.0
