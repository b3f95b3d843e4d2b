"""Physical storage of values: layout permutations, dtypes and physical shapes.

A value's shape is logical (torch order); its storage is a C-contiguous numpy array whose
dims are the logical dims permuted by its layout (`NHWC`: logical dims 0, 2, 3, 1), of its
dtype, bf16 as its bits (`storage`).
"""

from __future__ import annotations

import math

import numpy as np

from cuvil.ir.devices import HOST, device
from cuvil.ir.types import NHWC, SYMBOLIC_DIM_SIZE, Dim, DType, TensorType, is_static
from cuvil.lower.bf16 import BF16_BITS

_NP = {DType.f32: "np.float32", DType.f64: "np.float64", DType.i8: "np.int8",
       DType.u8: "np.uint8", DType.i32: "np.int32", DType.i64: "np.int64",
       DType.bool: "np.bool_", DType.f16: "np.float16"}


def kernel_dtype(dtype: DType, on: str = HOST) -> bool:
    """Whether kernels generated for device `on` handle this dtype: f16 where the device
    has f16 kernels (`Device.half_kernels`); elsewhere f16, and bf16 everywhere, run
    through torch."""
    if dtype is DType.f16:
        return device(on).half_kernels
    return dtype in _NP


def storage(dtype: DType) -> np.dtype:
    """The numpy dtype a value's array has: its own, or for bf16 (which numpy lacks) its
    bits as uint16, which torch sees as bfloat16 (`to_tensor`)."""
    return BF16_BITS if dtype is DType.bf16 else dtype.numpy


def np_name(dtype: DType) -> str:
    """The dtype as generated code spells it (`np.float32`)."""
    return _NP[dtype]


def layout_perm(t: TensorType) -> tuple[int, ...]:
    """For each physical dim, the logical dim stored there."""
    if t.layout == NHWC and t.rank == 4:
        return (0, 2, 3, 1)
    return tuple(range(t.rank))


def physical_shape(t: TensorType) -> tuple[Dim, ...]:
    return tuple(t.shape[p] for p in layout_perm(t))


def is_identity_layout(t: TensorType) -> bool:
    """Whether storage order equals logical order (a reshape is then a free view)."""
    return layout_perm(t) == tuple(range(t.rank))


def is_one(d: Dim) -> bool:
    return is_static(d) and d == 1


def reference_numel(shape: tuple) -> int:
    """Elements of a physical shape with every symbolic dim at `SYMBOLIC_DIM_SIZE` (a
    `threads` dim at 2): what compile-time decisions and memory figures assume."""
    sizes = []
    for d in shape:
        if d == "threads":
            sizes.append(2)
        elif isinstance(d, int):
            sizes.append(d)
        else:
            sizes.append(int(d.subs({s: SYMBOLIC_DIM_SIZE for s in d.free_symbols})))
    return math.prod(sizes)
