"""Dims held as text evaluate exactly as the IR's sympy dims do, and the reference
executor and the compiled call bind input shapes through the one `bind_shapes`."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuvil.errors import CuvilError
from cuvil.ir.dim_text import size
from cuvil.ir.types import DType, TensorType, eval_dim, format_dim, parse_dim, sym
from cuvil.ops.execute import bind_symbols

DIMS = ["batch", "4*batch", "batch + seq", "batch*seq - 1", "batch//3", "floor(batch/2)",
        "ceiling(seq/4)", "Min(batch,64)", "Max(seq,batch)", "Mod(batch,5)",
        "floor((batch - 3)/2) + 1", "2*floor(seq/3)"]


@given(batch=st.integers(1, 10_000), seq=st.integers(1, 10_000))
def test_a_dim_as_text_is_the_size_sympy_gives(batch, seq):
    env = {"batch": batch, "seq": seq}
    for text in DIMS:
        d = parse_dim(text)
        assert size(format_dim(d), env) == eval_dim(d, env), text



def test_the_reference_executor_binds_and_names_mismatches_the_same_way():
    params = [("x", TensorType((sym("batch"), 8), DType.f32))]
    assert bind_symbols(params, [(5, 8)]) == {"batch": 5}
    with pytest.raises(CuvilError, match=r"input 'x': expected shape \[batch, 8\] "
                                         r"\(batch=5\), got \[5, 9\]"):
        bind_symbols(params, [(5, 9)])
    with pytest.raises(CuvilError, match="expected dtype f32, got f64"):
        bind_symbols(params, [(5, 8)], [DType.f64])
