"""The liveness-based memory plan: slots shared only by values whose lifetimes do not
overlap, one slot per dtype, sized per set of dim sizes."""

from __future__ import annotations

from cuvil.ir import DType, sym
from cuvil.runtime.plan import Buffer, MemoryPlan

N = sym("n")


def test_values_with_disjoint_lifetimes_share_a_slot():
    plan = MemoryPlan([Buffer("a", DType.f32, (N, 4), 0, 1), Buffer("b", DType.f32, (N, 4), 1, 2),
                       Buffer("c", DType.f32, (N, 4), 2, 3)])
    assert plan.slot_of["a"] == plan.slot_of["c"] != plan.slot_of["b"]
    assert plan.nbytes({"n": 5}, 1) == 2 * 5 * 4 * 4
    assert plan.naive_nbytes({"n": 5}, 1) == 3 * 5 * 4 * 4


def test_dtypes_never_share_and_slots_take_their_largest_value():
    plan = MemoryPlan([Buffer("a", DType.f32, (8,), 0, 0), Buffer("b", DType.i64, (2,), 1, 1),
                       Buffer("c", DType.f32, (N,), 2, 2)])
    assert plan.slot_of["a"] == plan.slot_of["c"] != plan.slot_of["b"]
    assert plan.slot_sizes({"n": 3}, 1)[plan.slot_of["a"]] == 8
    assert plan.slot_sizes({"n": 30}, 1)[plan.slot_of["a"]] == 30
