"""`cuvil.aligned`: arrays whose data starts on a cache line, with the values and shape
asked for; and every constant and planned buffer of a compiled graph is one, whether
lowered now or read back from the program cache."""

import numpy as np
import pytest
import torch

import cuvil
from cuvil import aligned


@pytest.mark.parametrize("shape", [(), (0,), (1,), (3, 5), (7, 0, 2), (1000, 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.int64])
def test_empty_is_aligned_and_shaped(shape, dtype):
    a = aligned.empty(shape, dtype)
    assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous
    assert a.size == 0 or a.ctypes.data % aligned.LINE == 0
    a[...] = 1  # writable, and as large as its shape
    assert a.sum() == a.size


def test_contiguous_copies_only_what_it_must():
    raw = np.arange(1 + 64 * 8, dtype=np.float32)
    misaligned = raw[1:] if raw.ctypes.data % 64 == 0 else raw[:-1]
    for a in (misaligned.reshape(8, 64), misaligned.reshape(64, 8).T, np.float32(3.0)):
        got = aligned.contiguous(a)
        np.testing.assert_array_equal(got, a)
        assert got.shape == np.shape(a) and got.flags.c_contiguous
        assert got.ctypes.data % aligned.LINE == 0
    same = aligned.empty((4, 16), np.float32)
    assert aligned.contiguous(same).ctypes.data == same.ctypes.data  # no copy


def test_a_compiled_graph_holds_aligned_constants_and_buffers(tmp_path, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    model, inputs = cuvil.zoo.get("mlp", batch=2)
    lowered = cuvil.compile(model, inputs, cache=False)
    cuvil.compile(model, inputs)  # stores the program
    stored = cuvil.compile(model, inputs)
    assert stored.report.cache_hit  # read back from the program cache
    for compiled in (lowered, stored):
        with torch.no_grad():
            torch.testing.assert_close(compiled(*inputs), model(*inputs))
        plan = next(iter(compiled._plans.values()))
        arrays = [a for a in (*compiled._consts, *plan.buffers) if a.size]
        assert arrays and all(a.ctypes.data % aligned.LINE == 0 for a in arrays)
