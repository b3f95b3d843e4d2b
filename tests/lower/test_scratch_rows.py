"""A thread's row of scratch (`Scratch.rows`) ends at least `ROW_GAP` bytes before the next
thread's: two threads rewriting rows that lie within a few KiB of each other run 8-9%
slower (docs/performance.md, "Where the time goes"). The rows are lengthened, never
shortened, and the drivers use only the start of theirs: the CNN compiled with padded rows
still matches torch."""

from __future__ import annotations

import math

import pytest
import torch

import cuvil
from cuvil import zoo
from cuvil.ir import sym
from cuvil.ir.types import DType
from cuvil.lower.spec import ROW_GAP, Scratch


@pytest.mark.parametrize(("dtype", "row"), [
    (DType.f32, (5184,)),  # the CNN's 16-channel image, arranged
    (DType.f32, (16, 32, 32)),  # its stem's output, pooled from the scratch
    (DType.f32, (3, 7)),  # a sub-row that does not divide the gap
    (DType.f64, (40000,)),  # a row longer than the gap
    (DType.u8, (1,)),
])
def test_a_row_gets_the_gap_after_what_it_holds(dtype, row):
    scratch = Scratch.rows(dtype, *row)
    assert scratch.shape[0] == "threads" and scratch.shape[2:] == row[1:]
    sub = math.prod(row[1:])  # elements of one step of the first dim
    free = (scratch.shape[1] - row[0]) * sub * dtype.itemsize
    assert ROW_GAP <= free < ROW_GAP + sub * dtype.itemsize


def test_a_symbolic_row():
    n = sym("n")
    assert Scratch.rows(DType.f32, n).shape == ("threads", n + ROW_GAP // 4)
    assert Scratch.rows(DType.f32, 4, n).shape == ("threads", 4, n)  # unknown sub-row: as is


def test_the_cnn_runs_on_padded_rows():
    model, inputs = zoo.get("cnn", batch=4)
    compiled = cuvil.compile(model, inputs, threads=2)
    rows = [a.shape for a in compiled._program.arrays.values()
            if a.kind == "scratch" and a.shape[0] == "threads"]
    assert ("threads", 16 + ROW_GAP // (32 * 32 * 4), 32, 32) in rows  # the stem's pool
    assert ("threads", 3 * 34 * 34 + ROW_GAP // 4) in rows  # the stem's padded image
    assert ("threads", 16 * 18 * 18 + ROW_GAP // 4) in rows  # the 3x3 layers'
    for batch in (4, 1):  # threads taking images; one image split between threads
        x = torch.randn(batch, 3, 32, 32)
        with torch.inference_mode():
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
