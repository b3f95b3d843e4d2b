"""`copy_into`, the movement template's copy: numpy's below `LARGE` elements, torch's
`copy_` above; either way the elements `np.copyto` writes, for transposed, sliced,
broadcast and flipped sources and every dtype the template moves."""

from __future__ import annotations

import numpy as np
import pytest

from cuvil.targets.cpu.kernels.copies import LARGE, copy_into


def views(base: np.ndarray) -> dict[str, np.ndarray]:
    return {"transposed": base.transpose(1, 0, 2), "sliced": base[:, 1:, ::2],
            "broadcast": base[:1], "flipped": base[:, ::-1], "whole": base}


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int64, np.int8,
                                   np.uint8, np.bool_, np.uint16])
@pytest.mark.parametrize("rows", [4, LARGE // 64 + 8])  # below LARGE, above it
def test_a_copy_writes_what_numpy_writes(dtype, rows):
    rng = np.random.default_rng(0)
    base = (rng.standard_normal((rows, 8, 16)) * 50).astype(dtype)
    for name, src in views(base).items():
        shape = (base.shape[0], *src.shape[1:]) if name == "broadcast" else src.shape
        want, got = np.empty(shape, dtype), np.full(shape, 7, dtype)
        np.copyto(want, src)
        copy_into(got, src)
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_a_read_only_source_is_copied_by_numpy():
    src = np.arange(LARGE * 2, dtype=np.float32).reshape(-1, 64).T
    src.flags.writeable = False
    out = np.empty(src.shape, np.float32)
    copy_into(out, src)
    np.testing.assert_array_equal(out, src)


def test_a_reversed_destination_is_written_by_numpy():
    src = np.arange(LARGE * 2, dtype=np.float32).reshape(-1, 64)
    out = np.zeros_like(src)
    copy_into(out[::-1], src)
    np.testing.assert_array_equal(out[::-1], src)
