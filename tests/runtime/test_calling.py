"""`CallSpec`: binding input shapes finds the symbols' sizes and names every mismatch; the
slots hold every planned buffer and the memory figure counts them without allocating; a
fallback's result is torch's own memory only where the entry takes it and it is laid out
as planned and of its own, else copied into its buffer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cuvil.errors import CuvilError
from cuvil.ir.types import DType
from cuvil.lower.physical import storage
from cuvil.runtime.calling import (
    DTYPE_NAMES,
    Array,
    CallSpec,
    Param,
    logical_view,
    settle,
    storages_of,
)


def test_dtype_names_are_the_irs():
    assert {storage(d).name: d.value for d in DType} == DTYPE_NAMES


SPEC = CallSpec("g", (Param("x", ("batch", 8), "f32"), Param("y", ("2*batch",), "f32")),
                (Array("v1", ("batch", 8), "float32", 0), Array("s1", ("threads", 4),
                                                                "float32", 0)),
                (Array("o1", ("batch", 8), "float32"),), (("float32", "cpu"),), ("batch",),
                {"out": "o1"}, "out")


def test_binding_reads_the_symbols_and_allocates_views_of_one_slot():
    env = SPEC.bind([(3, 8), (6,)], ["f32", "f32"])
    assert env == {"batch": 3}
    v1, s1 = SPEC.allocate(env, threads=2)
    assert v1.shape == (3, 8) and s1.shape == (2, 4) and v1.base is s1.base
    assert SPEC.output_shapes(env)[0][0] == (3, 8)


@pytest.mark.parametrize("shapes, dtypes, message", [
    ([(3, 8), (5,)], None, r"input 'y': expected shape \[2\*batch\] \(batch=3\), got \[5\]"),
    ([(3, 9), (6,)], None, r"input 'x': expected shape \[batch, 8\] \(batch=3\)"),
    ([(3,), (6,)], None, r"input 'x': expected shape \[batch, 8\], got \[3\]"),
    ([(3, 8), (6,)], ["f64", "f32"], r"input 'x': expected dtype f32, got f64"),
])
def test_every_mismatch_is_named(shapes, dtypes, message):
    with pytest.raises(CuvilError, match=message):
        SPEC.bind(shapes, dtypes)


def test_memory_is_the_slots_at_those_sizes():
    assert SPEC.slot_sizes({"batch": 3}, threads=2) == [24]
    assert SPEC.slot_sizes({"batch": 1}, threads=4) == [16]


NHWC = (0, 2, 3, 1)  # a physical NHWC array's logical dims


def test_a_fallback_result_is_copied_into_its_buffer_unless_the_entry_takes_it():
    dest, result = np.zeros((2, 3), np.float32), torch.randn(2, 3)
    assert settle(result, dest, (0, 1), []) is dest
    np.testing.assert_array_equal(dest, result.numpy())
    taken = settle(result, np.zeros((2, 3), np.float32), (0, 1), [], own=True)
    assert np.shares_memory(taken, result.numpy())


def test_the_entry_takes_torchs_memory_only_laid_out_as_planned_and_of_its_own():
    x = torch.randn(2, 4, 3, 3)
    nhwc = x.contiguous(memory_format=torch.channels_last)
    taken = settle(nhwc, np.zeros((2, 3, 3, 4), np.float32), NHWC, frozenset(), own=True)
    assert np.shares_memory(taken, nhwc.permute(NHWC).numpy())
    dest = np.zeros((2, 3, 3, 4), np.float32)  # NCHW memory where NHWC is planned: copied
    assert settle(x, dest, NHWC, frozenset(), own=True) is dest
    torch.testing.assert_close(logical_view(dest, NHWC), x)
    dest = np.zeros((2, 4, 3, 3), np.float32)  # a view of an input: copied
    assert settle(x.view(2, 4, 9).view(2, 4, 3, 3), dest, (0, 1, 2, 3), storages_of([x]),
                  own=True) is dest
    torch.testing.assert_close(torch.from_numpy(dest), x)
